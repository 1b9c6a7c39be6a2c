//! The web page (H5): `hangar serve` serves it at `/` and `/ui/...`, with its script and style
//! compiled into the binary, so nothing is fetched from anywhere else at run time.
//!
//! The page is a static shell (`web/index.html`) and a small hand-written script (`web/app.js`)
//! that talks to the `/v1` API with the person's token, exactly as the CLI does. The shell holds no
//! data: without a token the page shows only the sign-in form, and every view is filled from API
//! answers that need the token. `api.rs` holds the few API routes the page needed on top of the
//! CLI's (who am I, the sessions board, a turn's audit records).
//!
//! Non-goals: no server-side sessions or cookies (the token travels as a bearer header, so there
//! is nothing for another site to ride on), no build step (the script is plain JavaScript).

pub(crate) mod api;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../../web/index.html");
const APP_JS: &str = include_str!("../../web/app.js");
const APP_CSS: &str = include_str!("../../web/app.css");
const ICON_SVG: &str = include_str!("../../web/icon.svg");

/// What the page's responses allow: its own script, style and API only; no frames, no inline
/// script, no other origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's routes: the shell at `/`, `/ui` and every `/ui/...` path (the script reads the
/// path), and its assets under `/assets/`.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(shell))
        .route("/ui", get(shell))
        .route("/ui/", get(shell))
        .route("/ui/{*path}", get(shell))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/assets/icon.svg", get(icon))
        .route("/favicon.ico", get(icon))
}

fn asset(body: &'static str, content_type: &'static str, cache: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

async fn shell() -> Response {
    let mut r = asset(INDEX_HTML, "text/html; charset=utf-8", "no-store");
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

// The assets change with the binary; `no-cache` makes the browser check them each time (cheap on
// loopback) so a new hangar never runs with an old script.
async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8", "no-cache")
}

async fn app_css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8", "no-cache")
}

async fn icon() -> Response {
    asset(ICON_SVG, "image/svg+xml", "no-cache")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    #[test]
    fn the_shell_loads_only_its_own_assets() {
        let html = super::INDEX_HTML;
        assert!(html.contains("/assets/app.js") && html.contains("/assets/app.css"));
        for bad in ["http://", "https://", "//cdn", "<script>", "style="] {
            assert!(!html.contains(bad), "index.html must not contain {bad:?}");
        }
        for asset in [super::APP_JS, super::APP_CSS] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
        }
        // Every piece of data reaches the page as text, never as markup.
        assert!(!super::APP_JS.contains("innerHTML"));
    }
}
