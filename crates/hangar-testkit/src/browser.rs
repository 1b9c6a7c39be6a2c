//! A real headless Chromium for the web page's end-to-end tests, driven through Debian's
//! `chromedriver` over the W3C WebDriver protocol, plus the small blocking HTTP/1.1 client that
//! speaks to it (std only, 127.0.0.1; tests use it for the API too).
//!
//! Chromium runs with [`CHROMIUM_ARGS`] and a fresh `--user-data-dir` of its own, removed when the
//! [`Browser`] is dropped (which also ends the WebDriver session and the chromedriver process).
//! Installed by `scripts/install-browser` (`apt-get install chromium chromium-driver`); the paths
//! can be overridden with `HANGAR_CHROMIUM_BIN` and `HANGAR_CHROMEDRIVER_BIN`.
//!
//! Non-goals: no browser download, no other browser, nothing beyond what the tests use.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::TestkitError;

/// The flags every test Chromium runs with (headless, no sandbox inside the test's own, and no
/// traffic of its own: no background networking, component updates, sync or first-run pages).
pub const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
];

/// Environment variable naming the Chromium binary (default `/usr/bin/chromium`).
pub const CHROMIUM_BIN_ENV: &str = "HANGAR_CHROMIUM_BIN";
/// Environment variable naming chromedriver (default `/usr/bin/chromedriver`).
pub const CHROMEDRIVER_BIN_ENV: &str = "HANGAR_CHROMEDRIVER_BIN";

const BROWSER_HINT: &str = "install Debian's chromium and chromium-driver (scripts/install-browser), \
                            or set HANGAR_CHROMIUM_BIN and HANGAR_CHROMEDRIVER_BIN";

/// The W3C name of an element reference in WebDriver JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn browser_err(what: impl Into<String>) -> TestkitError {
    TestkitError::Browser(what.into())
}

fn tool(env: &str, default: &str, what: &'static str) -> Result<PathBuf, TestkitError> {
    let path = std::env::var_os(env)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from);
    if path.is_file() {
        Ok(path)
    } else {
        Err(TestkitError::ToolNotFound {
            what,
            path,
            hint: BROWSER_HINT,
        })
    }
}

/// The Chromium binary the tests use.
pub fn chromium_bin() -> Result<PathBuf, TestkitError> {
    tool(CHROMIUM_BIN_ENV, "/usr/bin/chromium", "Chromium")
}

/// The chromedriver binary the tests use.
pub fn chromedriver_bin() -> Result<PathBuf, TestkitError> {
    tool(
        CHROMEDRIVER_BIN_ENV,
        "/usr/bin/chromedriver",
        "chromedriver",
    )
}

/// One blocking HTTP/1.1 request to a `http://127.0.0.1:PORT/...` URL with an optional bearer
/// token and JSON body; returns the status and the body as JSON (`Null` when it is not JSON).
pub fn http_json(
    method: &str,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), TestkitError> {
    let (status, bytes) = http(method, url, bearer, body, Duration::from_secs(120))?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// One blocking HTTP/1.1 request (`Connection: close`); the status and the raw body.
pub fn http(
    method: &str,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), TestkitError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| browser_err(format!("{url}: only http:// URLs")))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let ctx = |what: &str| format!("{what} {method} {url}");
    let mut s = TcpStream::connect(host).map_err(|e| TestkitError::io(ctx("connecting for"), e))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| TestkitError::io(ctx("setting a timeout for"), e))?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(t) = bearer {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if body.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!(
        "Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    ));
    s.write_all(req.as_bytes())
        .map_err(|e| TestkitError::io(ctx("sending"), e))?;
    let mut r = BufReader::new(s);
    let mut status_line = String::new();
    r.read_line(&mut status_line)
        .map_err(|e| TestkitError::io(ctx("reading the answer to"), e))?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            browser_err(format!(
                "{}: bad status line {status_line:?}",
                ctx("answer to")
            ))
        })?;
    let (mut chunked, mut length) = (false, None::<usize>);
    loop {
        let mut line = String::new();
        r.read_line(&mut line)
            .map_err(|e| TestkitError::io(ctx("reading headers of"), e))?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if k == "content-length" {
                length = v.parse().ok();
            }
        }
    }
    let mut out = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)
                .map_err(|e| TestkitError::io(ctx("reading a chunk of"), e))?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| {
                    browser_err(format!("{}: bad chunk size {size:?}", ctx("answer to")))
                })?;
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)
                .map_err(|e| TestkitError::io(ctx("reading a chunk of"), e))?;
            chunk.truncate(n);
            out.extend(chunk);
        }
    } else if let Some(n) = length {
        out.resize(n, 0);
        r.read_exact(&mut out)
            .map_err(|e| TestkitError::io(ctx("reading the body of"), e))?;
    } else {
        r.read_to_end(&mut out)
            .map_err(|e| TestkitError::io(ctx("reading the body of"), e))?;
    }
    Ok((status, out))
}

/// A headless Chromium with one WebDriver session.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a Chromium window of `width`×`height`
    /// with a fresh profile.
    pub fn start(width: u32, height: u32) -> Result<Browser, TestkitError> {
        let chromium = chromium_bin()?;
        let mut driver = Command::new(chromedriver_bin()?)
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestkitError::io("starting chromedriver", e))?;
        let port = match read_port(&mut driver) {
            Ok(p) => p,
            Err(e) => {
                let _ = driver.kill();
                let _ = driver.wait();
                return Err(e);
            }
        };
        let profile = std::env::temp_dir().join(format!(
            "hangar-chromium-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            profile,
        };
        std::fs::create_dir_all(&b.profile)
            .map_err(|e| TestkitError::io(format!("creating {}", b.profile.display()), e))?;
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", b.profile.display()));
        args.push(format!("--window-size={width},{height}"));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
        }}});
        let deadline = Instant::now() + Duration::from_secs(30);
        let v = loop {
            match b.call("POST", "/session", Some(&caps)) {
                Ok(v) => break v,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        b.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| browser_err(format!("no session id in {v}")))?
            .to_owned();
        Ok(b)
    }

    /// One WebDriver command; its `value`, or an error with WebDriver's message.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, TestkitError> {
        let url = format!("{}{path}", self.base);
        let body = match (method, body) {
            ("POST", None) => Some(json!({})),
            (_, b) => b.cloned(),
        };
        let (status, v) = http_json(method, &url, None, body.as_ref())?;
        if status >= 400 {
            return Err(browser_err(format!(
                "{method} {path}: {} {}",
                v["value"]["error"].as_str().unwrap_or("error"),
                v["value"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            )));
        }
        Ok(v["value"].clone())
    }

    fn s(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) -> Result<(), TestkitError> {
        self.call("POST", &self.s("/url"), Some(&json!({"url": url})))
            .map(drop)
    }

    /// The page's current URL.
    pub fn url(&self) -> Result<String, TestkitError> {
        Ok(self
            .call("GET", &self.s("/url"), None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Resizes the window (e.g. to a phone's 390×844).
    pub fn resize(&self, width: u32, height: u32) -> Result<(), TestkitError> {
        self.call(
            "POST",
            &self.s("/window/rect"),
            Some(&json!({"width": width, "height": height})),
        )
        .map(drop)
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns its value.
    pub fn js(&self, script: &str, args: Value) -> Result<Value, TestkitError> {
        self.call(
            "POST",
            &self.s("/execute/sync"),
            Some(&json!({"script": script, "args": args})),
        )
    }

    /// Waits until `script` returns something truthy (not null, false, 0 or ""), and returns it.
    pub fn wait_js(
        &self,
        what: &str,
        script: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<Value, TestkitError> {
        let deadline = Instant::now() + timeout;
        let mut last_err = String::new();
        loop {
            match self.js(script, args.clone()) {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(_) => {}
                Err(e) => last_err = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(browser_err(format!(
                    "timed out after {timeout:?} waiting for {what} {last_err}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first element matching the CSS selector, if any.
    pub fn find(&self, css: &str) -> Result<Option<String>, TestkitError> {
        let v = self.call(
            "POST",
            &self.s("/elements"),
            Some(&json!({"using": "css selector", "value": css})),
        )?;
        Ok(v.as_array()
            .and_then(|a| a.first())
            .and_then(|e| e[ELEMENT].as_str())
            .map(str::to_owned))
    }

    /// Waits for an element matching the CSS selector and returns it.
    pub fn wait_for(&self, css: &str, timeout: Duration) -> Result<String, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.find(css)? {
                return Ok(e);
            }
            if Instant::now() > deadline {
                return Err(browser_err(format!(
                    "timed out after {timeout:?} waiting for {css:?} on {}",
                    self.url().unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Scrolls the element matching `css` to the middle of the window and clicks it as a person
    /// would (WebDriver's click: the element must be visible and not covered).
    pub fn click(&self, css: &str) -> Result<(), TestkitError> {
        let e = self.wait_for(css, Duration::from_secs(10))?;
        self.js(
            "arguments[0].scrollIntoView({block: 'center'});",
            json!([{ELEMENT: e}]),
        )?;
        self.call("POST", &self.s(&format!("/element/{e}/click")), None)
            .map(drop)
    }

    /// Types `text` into the element matching `css` (after clearing it), key by key.
    pub fn type_into(&self, css: &str, text: &str) -> Result<(), TestkitError> {
        let e = self.wait_for(css, Duration::from_secs(10))?;
        self.call("POST", &self.s(&format!("/element/{e}/clear")), None)?;
        self.call(
            "POST",
            &self.s(&format!("/element/{e}/value")),
            Some(&json!({"text": text})),
        )
        .map(drop)
    }

    /// The rendered text of the first element matching `css` ("" when there is none).
    pub fn text(&self, css: &str) -> Result<String, TestkitError> {
        match self.find(css)? {
            Some(e) => Ok(self
                .call("GET", &self.s(&format!("/element/{e}/text")), None)?
                .as_str()
                .unwrap_or_default()
                .to_owned()),
            None => Ok(String::new()),
        }
    }

    /// Saves a PNG of the whole page (beyond the window, through Chromium's DevTools command
    /// `Page.captureScreenshot`) to `path`; its folder is made if needed.
    pub fn screenshot(&self, path: &Path) -> Result<(), TestkitError> {
        // From the top, so sticky bars sit where a person first sees them; as wide as the window
        // (the capture lays the page out at the clip's width).
        let size = self.js(
            "window.scrollTo(0, 0); const d = document.documentElement; \
             return [Math.max(window.innerWidth, d.scrollWidth), Math.max(window.innerHeight, d.scrollHeight)];",
            json!([]),
        )?;
        let v = self.call(
            "POST",
            &self.s("/goog/cdp/execute"),
            Some(&json!({"cmd": "Page.captureScreenshot", "params": {
                "format": "png", "captureBeyondViewport": true,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
            }})),
        )?;
        let png = base64_decode(v["data"].as_str().unwrap_or_default())
            .ok_or_else(|| browser_err("the screenshot is not base64"))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| TestkitError::io(format!("creating {}", dir.display()), e))?;
        }
        std::fs::write(path, png)
            .map_err(|e| TestkitError::io(format!("writing {}", path.display()), e))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &self.s(""), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// chromedriver's `--port=0` prints "ChromeDriver was started successfully on port N.".
fn read_port(driver: &mut Child) -> Result<u16, TestkitError> {
    let out = driver
        .stdout
        .take()
        .ok_or_else(|| browser_err("chromedriver has no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        let mut sent = false;
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            if !sent && let Some(rest) = line.split("on port ").nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(p) = digits.parse::<u16>()
                    && p != 0
                {
                    let _ = tx.send(p);
                    sent = true;
                }
            }
            line.clear();
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .map_err(|_| browser_err("chromedriver did not say which port it listens on"))
}

/// Standard base64 (with padding) to bytes.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0_u32, 0_u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn base64_decodes_padded_text() {
        assert_eq!(base64_decode("aGFuZ2Fy").unwrap(), b"hangar");
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aA==").unwrap(), b"h");
        assert!(base64_decode("a*b").is_none());
    }
}
