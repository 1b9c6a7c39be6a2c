//! The JSON scenario format (what `hangar-fake-model --script FILE` reads) and its mapping onto
//! [`Script`] / [`Step`]. The format is documented in the crate docs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::TestkitError;
use crate::script::{Block, Expect, Script, Step, error_body};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptSpec {
    #[serde(default)]
    steps: Vec<StepSpec>,
    #[serde(default)]
    sessions: BTreeMap<String, Vec<StepSpec>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    text: Option<String>,
    tool: Option<String>,
    input: Option<Value>,
    exec: Option<ExecSpec>,
    patch: Option<String>,
    failed: Option<String>,
    slow_text: Option<SlowTextSpec>,
    error: Option<ErrorSpec>,
    blocks: Option<Vec<BlockSpec>>,
    expect: Option<Expect>,
    delay_ms: Option<u64>,
    chunk_delay_ms: Option<u64>,
    chunks: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockSpec {
    text: Option<String>,
    tool: Option<String>,
    input: Option<Value>,
    exec: Option<ExecSpec>,
    patch: Option<String>,
}

/// `"exec": "cmd"` or `"exec": {"cmd": "…", …extra arguments}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ExecSpec {
    Cmd(String),
    Full(Map<String, Value>),
}

impl ExecSpec {
    fn into_block(self) -> Result<Block, String> {
        match self {
            Self::Cmd(cmd) => Ok(Block::exec(cmd)),
            Self::Full(mut extra) => match extra.remove("cmd") {
                Some(Value::String(cmd)) => Ok(Block::Exec { cmd, extra }),
                _ => Err(
                    "\"exec\" is a command string or an object with a string \"cmd\"".to_owned(),
                ),
            },
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlowTextSpec {
    chunks: usize,
    delay_ms: u64,
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorSpec {
    status: u16,
    message: Option<String>,
    body: Option<Value>,
}

impl Script {
    /// Parses a scenario from JSON text (format in the crate docs).
    pub fn from_json_str(text: &str) -> Result<Self, TestkitError> {
        let spec: ScriptSpec =
            serde_json::from_str(text).map_err(|e| TestkitError::Scenario(e.to_string()))?;
        let mut script = Script::new(convert_steps(spec.steps, "steps")?);
        for (session, steps) in spec.sessions {
            let steps = convert_steps(steps, &format!("sessions.{session}"))?;
            script = script.session(session, steps);
        }
        Ok(script)
    }

    /// Reads and parses a scenario file.
    pub fn load(path: &Path) -> Result<Self, TestkitError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TestkitError::io(format!("reading scenario {}", path.display()), e))?;
        Self::from_json_str(&text)
            .map_err(|e| TestkitError::Scenario(format!("{}: {e}", path.display())))
    }
}

fn convert_steps(specs: Vec<StepSpec>, at: &str) -> Result<Vec<Step>, TestkitError> {
    specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            convert_step(spec).map_err(|msg| TestkitError::Scenario(format!("{at}[{i}]: {msg}")))
        })
        .collect()
}

fn convert_step(spec: StepSpec) -> Result<Step, String> {
    let forms = [
        spec.text.is_some(),
        spec.tool.is_some(),
        spec.exec.is_some(),
        spec.patch.is_some(),
        spec.slow_text.is_some(),
        spec.error.is_some(),
        spec.blocks.is_some(),
    ];
    let form_count = forms.iter().filter(|present| **present).count();
    // `failed` is a form of its own, or a modifier ending any streamed form with a failure.
    if form_count > 1 || (form_count == 0 && spec.failed.is_none()) {
        return Err(
            "a step needs exactly one of \"text\", \"tool\", \"exec\", \"patch\", \
                    \"slow_text\", \"error\", \"blocks\", \"failed\""
                .to_owned(),
        );
    }
    if spec.failed.is_some() && spec.error.is_some() {
        return Err("\"failed\" ends a stream; it does not go with \"error\"".to_owned());
    }
    if spec.input.is_some() && spec.tool.is_none() {
        return Err("\"input\" belongs to a \"tool\" step".to_owned());
    }
    let mut step = if let Some(text) = spec.text {
        Step::text(text)
    } else if let Some(name) = spec.tool {
        Step::tool(name, spec.input.unwrap_or_else(empty_object))
    } else if let Some(exec) = spec.exec {
        Step::blocks(vec![exec.into_block()?])
    } else if let Some(patch) = spec.patch {
        Step::patch(patch)
    } else if let Some(slow) = spec.slow_text {
        let base = Step::slow_text(slow.chunks, Duration::from_millis(slow.delay_ms));
        match slow.text {
            Some(text) => Step {
                reply: vec![Block::Text(text)],
                ..base
            },
            None => base,
        }
    } else if let Some(error) = spec.error {
        match (error.message, error.body) {
            (Some(_), Some(_)) => {
                return Err("\"error\" takes \"message\" or \"body\", not both".to_owned());
            }
            (None, Some(body)) => Step::http_error(error.status, body),
            (message, None) => {
                let message = message.unwrap_or_else(|| "hangar fake model: scripted error".into());
                Step::http_error(error.status, error_body(error.status, &message))
            }
        }
    } else if let Some(blocks) = spec.blocks {
        let blocks = blocks
            .into_iter()
            .enumerate()
            .map(|(i, b)| convert_block(b).map_err(|msg| format!("blocks[{i}]: {msg}")))
            .collect::<Result<Vec<_>, _>>()?;
        Step::blocks(blocks)
    } else {
        Step::blocks(Vec::new())
    };
    if let Some(message) = spec.failed {
        step = step.fail(message);
    }
    if let Some(chunks) = spec.chunks {
        step = step.chunks(chunks);
    }
    if let Some(ms) = spec.chunk_delay_ms {
        step = step.chunk_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = spec.delay_ms {
        step = step.delay(Duration::from_millis(ms));
    }
    if let Some(expect) = spec.expect {
        step = step.expect(expect);
    }
    Ok(step)
}

fn convert_block(spec: BlockSpec) -> Result<Block, String> {
    match (spec.text, spec.tool, spec.input, spec.exec, spec.patch) {
        (Some(text), None, None, None, None) => Ok(Block::Text(text)),
        (None, Some(name), input, None, None) => Ok(Block::ToolUse {
            name,
            input: input.unwrap_or_else(empty_object),
        }),
        (None, None, None, Some(exec), None) => exec.into_block(),
        (None, None, None, None, Some(patch)) => Ok(Block::Patch(patch)),
        _ => Err(
            "a block is {\"text\":…}, {\"tool\":…,\"input\":{…}}, {\"exec\":…} or \
                  {\"patch\":…}"
                .to_owned(),
        ),
    }
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}
