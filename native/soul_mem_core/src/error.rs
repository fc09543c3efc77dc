//! The one error type of the core crate.

use crate::embed::EmbedError;

/// Everything that can go wrong in `soul_mem_core`.
///
/// Each variant has a stable machine-readable [`Error::kind`] (the NIF layer turns it into an
/// atom) and a human message that names the node and field at fault where there is one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is not well-formed JSON of the expected shape (includes unknown enum tags).
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// Two nodes share one readable id (or UUID).
    #[error("duplicate id {id:?}{}", at_node(*.index))]
    DuplicateId {
        /// The id that occurs twice.
        id: String,
        /// Position of the second occurrence in the input, when known.
        index: Option<usize>,
    },
    /// A value that must be unique (a note's UUID, a link id) occurs twice.
    #[error("node {node:?} field {field}: {value} is used twice")]
    DuplicateField {
        /// The node (or row) holding the second occurrence.
        node: String,
        /// Dotted path of the field.
        field: String,
        /// The repeated value.
        value: String,
    },
    /// A link names a node that does not exist (and the import was declared complete).
    #[error("node {node:?}: link to missing id {target:?}")]
    MissingLinkTarget {
        /// The node whose link is dangling.
        node: String,
        /// The id it points to.
        target: String,
    },
    /// A number or string is outside its allowed range.
    #[error("node {node:?} field {field}: {message}")]
    InvalidValue {
        /// The node at fault.
        node: String,
        /// Dotted path of the field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A timestamp could not be parsed or is impossible.
    #[error("node {node:?} field {field}: invalid timestamp {value:?}")]
    InvalidTimestamp {
        /// The node at fault.
        node: String,
        /// Dotted path of the field.
        field: String,
        /// The offending text.
        value: String,
    },
    /// The input exceeds the configured size limit.
    #[error("input is {size} bytes, larger than the limit of {limit} bytes")]
    TooLarge {
        /// Input size in bytes.
        size: u64,
        /// Configured limit.
        limit: u64,
    },
    /// The input is not valid UTF-8.
    #[error("input is not valid UTF-8 (first bad byte at offset {0})")]
    NotUtf8(usize),
    /// A file could not be read or written.
    #[error("I/O error on {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error text.
        message: String,
    },
    /// A requested node or link does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// An argument is out of its domain (e.g. a damping factor outside [0, 1)).
    #[error("invalid argument {name}: {message}")]
    InvalidArgument {
        /// Parameter name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// The embedding model failed or is missing.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// A store is held by another process or another open handle in this process.
    #[error("store {path} is in use by another process or handle")]
    InUse {
        /// The database file.
        path: String,
    },
    /// A store file is damaged (bad header, truncated, malformed pages).
    #[error("store {path} is corrupt: {message}")]
    Corrupt {
        /// The database file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A file is a valid SQLite database but not a SoulMem store, or its schema is newer than
    /// this build understands.
    #[error("store {path} is incompatible: {message}")]
    Incompatible {
        /// The database file.
        path: String,
        /// Why it was refused.
        message: String,
    },
    /// A write was refused because the store, its file or its directory is read-only.
    #[error("store {path} is read-only: {message}")]
    ReadOnly {
        /// The database file.
        path: String,
        /// The underlying error text.
        message: String,
    },
    /// The disk (or the store's page quota) is full; the failed write changed nothing.
    #[error("store {path} is full: {message}")]
    DiskFull {
        /// The database file.
        path: String,
        /// The underlying error text.
        message: String,
    },
    /// An input holds more items than a configured limit allows (e.g. notes in one
    /// consolidation change set); nothing was applied.
    #[error("{what}: {count} given, at most {limit} allowed")]
    LimitExceeded {
        /// What was counted.
        what: String,
        /// How many the input has.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A character card, CHARX archive, PNG container or World Info file is malformed or
    /// unsafe (bad CRC, truncated chunk, path traversal, a decompression bomb, a missing
    /// field, a duplicate lorebook entry id …); `what` says what and where.
    #[error("invalid character card: {what}")]
    InvalidCard {
        /// What is wrong, naming the chunk, zip entry, field or lorebook entry.
        what: String,
    },
    /// A replica cannot take a batch of changes (another base, a missing batch), or a
    /// primary's changes were not all recorded: the replica must be rebuilt from a snapshot.
    #[error("replica out of step: {0}")]
    ReplicaMismatch(String),
}

fn at_node(index: Option<usize>) -> String {
    index.map(|i| format!(" at node #{i}")).unwrap_or_default()
}

impl Error {
    /// Stable snake_case name of the variant, used as the Elixir error atom.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidJson(_) => "invalid_json",
            Error::DuplicateId { .. } | Error::DuplicateField { .. } => "duplicate_id",
            Error::MissingLinkTarget { .. } => "missing_link_target",
            Error::InvalidValue { .. } => "invalid_value",
            Error::InvalidTimestamp { .. } => "invalid_timestamp",
            Error::TooLarge { .. } => "too_large",
            Error::NotUtf8(_) => "not_utf8",
            Error::Io { .. } => "io",
            Error::NotFound(_) => "not_found",
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::Embed(_) => "embedding",
            Error::InUse { .. } => "in_use",
            Error::Corrupt { .. } => "corrupt",
            Error::Incompatible { .. } => "incompatible",
            Error::ReadOnly { .. } => "read_only",
            Error::DiskFull { .. } => "disk_full",
            Error::LimitExceeded { .. } => "limit_exceeded",
            Error::InvalidCard { .. } => "invalid_card",
            Error::ReplicaMismatch(_) => "replica_mismatch",
        }
    }

    /// Shorthand for an [`Error::InvalidValue`].
    pub fn invalid_value(node: &str, field: &str, message: impl Into<String>) -> Self {
        Error::InvalidValue {
            node: node.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// Shorthand for an [`Error::InvalidCard`].
    pub fn invalid_card(what: impl Into<String>) -> Self {
        Error::InvalidCard { what: what.into() }
    }

    /// Shorthand for an [`Error::InvalidArgument`].
    pub fn invalid_argument(name: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            name: name.to_owned(),
            message: message.into(),
        }
    }

    /// Checks that an embedder (`who`) returned one vector per text: an
    /// [`Error::InvalidArgument`] naming both counts otherwise.
    pub fn check_vector_count(who: &str, vectors: usize, texts: usize) -> Result<()> {
        if vectors == texts {
            Ok(())
        } else {
            Err(Error::invalid_argument(
                who,
                format!("returned {vectors} vectors for {texts} texts"),
            ))
        }
    }

    /// Shorthand for an [`Error::Io`] from a `std::io::Error`.
    pub fn io(path: impl AsRef<std::path::Path>, err: &std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            message: err.to_string(),
        }
    }
}

/// Result alias of the core crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
