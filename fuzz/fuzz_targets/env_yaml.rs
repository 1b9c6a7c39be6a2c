//! Environments: `EnvSpec::from_yaml` (a file a person or a repository wrote) and
//! `EnvSpec::from_value` (the API's JSON).
//!
//! Checked: never a panic; every refusal says something; an accepted environment reads back
//! the same from the YAML hangar prints for it (`hangar env show`) and from its JSON form.
#![no_main]

use hangar_sandbox::EnvSpec;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn round_trips(spec: &EnvSpec) {
    let yaml = spec.to_yaml();
    match EnvSpec::from_yaml(&yaml) {
        Ok(again) => assert_eq!(&again, spec, "printed as:\n{yaml}"),
        Err(e) => panic!("{spec:?} printed as\n{yaml}\nreads back as an error: {e}"),
    }
    match EnvSpec::from_value(&spec.to_yaml_value()) {
        Ok(again) => assert_eq!(&again, spec),
        Err(e) => panic!("{spec:?} as a value reads back as an error: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match EnvSpec::from_yaml(&text) {
        Ok(spec) => round_trips(&spec),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        match EnvSpec::from_value(&v) {
            Ok(spec) => round_trips(&spec),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
});
