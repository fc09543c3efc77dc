//! Forgetting: Ebbinghaus decay, deterministic monotone masking, the lazy forgetting decision,
//! semantic field alignment and the LLM-free idle sweep over links.
//!
//! The seed's design (遗忘算法): memories are never deleted by forgetting; a note's
//! *missing degree* grows along the Ebbinghaus curve, its text is progressively masked
//! (`[masked]`), and past a threshold an LLM "tries to remember" by guessing the masked words.
//! This module is pure: the LLM call is done by the caller (Elixir); here are the decisions,
//! the masking, the prompts and the merge of the answer.
//!
//! Differences from the seed, on purpose:
//! - the mask shuffle is keyed by the text alone (the seed mixed in the degree), so the words
//!   masked at a higher degree are a superset of those masked at a lower one: forgetting only
//!   ever progresses, it never "remembers" a word it had lost;
//! - links are pruned by the idle [`sweep`] (the seed only had the intensity function);
//! - core notes (the self node) never forget.
//!
//! Files: `config.rs` (parameters), `decay.rs` (the curve), `mask.rs` (masking), `decide.rs`
//! (the lazy decision and one text's prompt and merge), `align.rs` (semantic field
//! alignment), `sweep.rs` (the idle link sweep) and `recall.rs` (what the character sees,
//! revision prompts and answers, next state).

mod align;
mod config;
mod decay;
mod decide;
mod mask;
mod recall;
mod sweep;

pub use align::*;
pub use config::*;
pub use decay::*;
pub use decide::*;
pub use mask::*;
pub use recall::*;
pub use sweep::*;
