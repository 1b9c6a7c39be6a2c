//! Which Claude Code settings a reviewed settings file may hold (issue 18): the driver checks the
//! file it is given with `--claude-settings` (and refuses the turn otherwise); the control plane
//! checks an environment's `claude_settings:` when it is applied, so a mistake is said then.
//!
//! The list is an allow-list: every key that runs code or changes where the conversation goes
//! (`hooks`, `env`, `apiKeyHelper`, `statusLine`, `otelHeadersHelper`, …) and every permission
//! that could skip the person or Tower (`permissions.allow`, `defaultMode`,
//! `additionalDirectories`) is refused, and so is a key a newer Claude Code adds, until it is
//! reviewed here. `permissions.deny` and `permissions.ask` only tighten.

use serde_json::{Map, Value};

/// The top-level keys a reviewed settings file may hold.
pub const ALLOWED: &[&str] = &[
    "mcpServers",
    "model",
    "permissions",
    "includeCoAuthoredBy",
    "alwaysThinkingEnabled",
    "outputStyle",
    "cleanupPeriodDays",
];

/// The `permissions` keys a reviewed file may hold: both only add checks.
pub const ALLOWED_PERMISSIONS: &[&str] = &["deny", "ask"];

/// The allow-list check: the settings without `mcpServers`, and the `mcpServers`.
pub fn check(value: Value) -> Result<(Map<String, Value>, Option<Value>), String> {
    let Value::Object(mut map) = value else {
        return Err("not a JSON object".into());
    };
    if let Some(bad) = map.keys().find(|k| !ALLOWED.contains(&k.as_str())) {
        return Err(format!(
            "the key {bad:?} is not one a reviewed settings file may hold (allowed: {})",
            ALLOWED.join(", ")
        ));
    }
    if let Some(p) = map.get("permissions") {
        let Value::Object(p) = p else {
            return Err("\"permissions\" is not an object".into());
        };
        if let Some(bad) = p
            .keys()
            .find(|k| !ALLOWED_PERMISSIONS.contains(&k.as_str()))
        {
            return Err(format!(
                "\"permissions.{bad}\" could skip the person or Tower; only permissions.deny and permissions.ask may be set"
            ));
        }
    }
    let mcp = map.remove("mcpServers");
    if mcp.as_ref().is_some_and(|m| !m.is_object()) {
        return Err("\"mcpServers\" is not an object".into());
    }
    Ok((map, mcp))
}
