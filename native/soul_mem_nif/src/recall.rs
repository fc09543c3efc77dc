//! Recall NIFs: one call from text (queries built in the core) or seed-shaped sub-queries to
//! traced items with their forgetting views; the core notes; recording retrievals; the
//! per-character recall defaults and forgetting parameters, set when they change; jieba
//! helpers. Requests and results cross as `NifMap`s; nested configuration and seed-shaped
//! queries are read from terms through the core's serde schemas (`term.rs`), never as JSON text.

use crate::error::{ok_or_error, NifError};
use crate::forget::at;
use crate::graph::{Handle, RecallDefaults};
use crate::term;
use chrono::{DateTime, Utc};
use rustler::{Atom, Env, NifMap, Term};
use soul_mem_core::engine::{EmbedderChoice, Engine};
use soul_mem_core::forget::{ForgetAction, ForgetConfig, NoteView};
use soul_mem_core::model::MemoryId;
use soul_mem_core::recalled::{RecallItem, RecallItems};
use soul_mem_core::retrieval::{PipelineConfig, PipelineResult, ShortContext, SubQuery};
use soul_mem_core::text::DEFAULT_KEYWORDS;

mod atoms {
    rustler::atoms! { read, write, no_action, mask_only, revised }
}

/// The window and summary handed to the ShortOnly stage.
#[derive(NifMap)]
pub struct Short {
    messages: Vec<String>,
    summary: Option<String>,
}

/// One recall: `text` (becomes sub-queries in the core) and/or `queries` (seed-shaped
/// sub-queries, a list of maps), the `short` context, a `config` of this recall only (`nil`:
/// the character's defaults), `forgetting` parameter overrides (`nil`: unchanged; set on the
/// character when given), `views` (attach each memory's forgetting view) and `now_ms` (the
/// recall's time, Unix ms; `nil`: now).
#[derive(NifMap)]
pub struct RecallRequest<'a> {
    text: Option<String>,
    max_keywords: Option<usize>,
    queries: Term<'a>,
    short: Option<Short>,
    config: Option<Term<'a>>,
    /// Forgetting parameter overrides (a map), set on the character when given.
    pub forgetting: Option<Term<'a>>,
    views: bool,
    now_ms: Option<i64>,
}

/// An LLM prompt (system and user message).
#[derive(NifMap)]
pub struct Prompt {
    system: String,
    user: String,
}

/// What forgetting makes of a recalled note now: the missing degree and its band, the action
/// (`:no_action | :mask_only | :revised`), the text the character sees, and — when a revision
/// is due and none is cached for the band — the prompt to ask an LLM.
#[derive(NifMap)]
pub struct ForgetView {
    id: String,
    missing_degree: f64,
    band: u8,
    action: Atom,
    visible_text: String,
    needs_revision: bool,
    prompt: Option<Prompt>,
}

/// One recalled memory, action or core note with its trace (see
/// `soul_mem_core::recalled::RecallItem`) and, for memories of a recall with `views`, its
/// forgetting view.
#[derive(NifMap)]
pub struct Item {
    id: String,
    uuid: String,
    kind: String,
    content: String,
    score: f64,
    stage: String,
    seeds: Vec<String>,
    channels: Vec<String>,
    path: Vec<String>,
    core: bool,
    action_type: Option<String>,
    forgetting: Option<ForgetView>,
}

/// A recall's items, how many sub-queries it ran and which lock it ran under (`:read` when
/// the index and decay factors were current, `:write` when it had to build them first).
#[derive(NifMap)]
pub struct RecallOutcome {
    memories: Vec<Item>,
    actions: Vec<Item>,
    self_knowledge: Vec<Item>,
    core: Vec<Item>,
    queries: usize,
    lock: Atom,
}

/// Configuration set when it changes: `recall` (the pipeline config recalls without their own
/// use, `nil`: unchanged) and `forgetting` (parameters, `nil`: unchanged).
#[derive(NifMap)]
pub struct Configuration<'a> {
    recall: Option<Term<'a>>,
    forgetting: Option<Term<'a>>,
}

fn item(i: RecallItem) -> Item {
    Item {
        id: i.id,
        uuid: i.uuid,
        kind: i.kind.to_owned(),
        content: i.content,
        score: i.score,
        stage: i.stage.to_owned(),
        seeds: i.seeds,
        channels: i.channels.iter().map(|c| (*c).to_owned()).collect(),
        path: i.path,
        core: i.core,
        action_type: i.action_type.map(str::to_owned),
        forgetting: None,
    }
}

/// The typed form of a forgetting view.
pub fn forget_view(v: NoteView) -> ForgetView {
    ForgetView {
        id: v.id,
        missing_degree: v.missing_degree,
        band: v.band,
        action: match v.action {
            ForgetAction::NoAction => atoms::no_action(),
            ForgetAction::MaskOnly => atoms::mask_only(),
            ForgetAction::Revised => atoms::revised(),
        },
        visible_text: v.visible_text,
        needs_revision: v.needs_revision,
        prompt: v.prompt.map(|p| Prompt {
            system: p.system,
            user: p.user,
        }),
    }
}

/// A recall's pipeline config: its own (validated), else the character's defaults; the
/// embedder's similarity floor unless the config chose one.
fn pipeline_config(
    handle: &Handle,
    own: Option<Term<'_>>,
    embedder: Option<&EmbedderChoice>,
) -> Result<PipelineConfig, NifError> {
    let defaults = match term::given(own) {
        Some(term) => decode_config(term)?,
        None => handle.recall_defaults()?,
    };
    let mut config = defaults.config;
    if let (false, Some(e)) = (defaults.floor_set, embedder) {
        config.similarity.similarity_threshold = e.similarity_floor();
    }
    Ok(config)
}

fn decode_config(term: Term<'_>) -> Result<RecallDefaults, NifError> {
    let value = term::value("config", term)?;
    let floor_set = value
        .pointer("/similarity/similarity_threshold")
        .is_some_and(|v| !v.is_null());
    let config: PipelineConfig = term::from_value("config", value)?;
    config.validate()?;
    Ok(RecallDefaults { config, floor_set })
}

/// The sub-queries of a request: its own, then those of its text.
fn sub_queries(request: &RecallRequest<'_>) -> Result<Vec<SubQuery>, NifError> {
    let mut queries: Vec<SubQuery> = term::decode("queries", request.queries)?;
    if let Some(text) = &request.text {
        let max = request.max_keywords.unwrap_or(DEFAULT_KEYWORDS);
        queries.extend(soul_mem_core::text::text_queries(text, max));
    }
    Ok(queries)
}

/// A decoded recall, ready to run on an engine.
pub struct Recall {
    /// The sub-queries (the request's and its text's).
    pub queries: Vec<SubQuery>,
    /// The window and summary.
    pub short: Option<ShortContext>,
    views: bool,
    /// The recall's time (the request's, else when it was decoded).
    pub now: DateTime<Utc>,
}

/// Decodes and checks a request on `engine` (for its embedder's floor): the queries (its own
/// and its text's), the config, the short context and the time.
fn decode(
    handle: &Handle,
    engine: &Engine,
    request: &RecallRequest<'_>,
) -> Result<(Recall, PipelineConfig), NifError> {
    let config = pipeline_config(handle, request.config, engine.embedder())?;
    let now = match request.now_ms {
        Some(ms) => at(ms, "now")?,
        None => Utc::now(),
    };
    let recall = Recall {
        queries: sub_queries(request)?,
        short: request.short.as_ref().map(|s| ShortContext {
            messages: s.messages.clone(),
            summary: s.summary.clone(),
        }),
        views: request.views,
        now,
    };
    Ok((recall, config))
}

pub(crate) fn decode_forgetting(term: Term<'_>) -> Result<ForgetConfig, NifError> {
    let cfg: ForgetConfig = term::decode("forgetting", term)?;
    cfg.validate()?;
    Ok(cfg)
}

impl Recall {
    /// Whether there is nothing to search for (the caller still checks a request's own
    /// config, so a bad option is an error whatever the request).
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// The typed outcome of `result` on `engine`, with forgetting views when asked.
    pub fn outcome(
        &self,
        engine: &Engine,
        result: Option<&PipelineResult>,
        lock: Atom,
    ) -> Result<RecallOutcome, NifError> {
        let items = match result {
            Some(r) => engine.items(r),
            None => RecallItems {
                core: engine.core_items(),
                ..RecallItems::default()
            },
        };
        let mut memories: Vec<Item> = items.memories.into_iter().map(item).collect();
        if self.views && !memories.is_empty() {
            let ids: Vec<MemoryId> = memories
                .iter()
                .filter_map(|m| engine.graph().resolve(&m.uuid))
                .collect();
            let views = engine.forget_view(&ids, self.now, engine.forget_config())?;
            for (m, v) in memories.iter_mut().zip(views) {
                m.forgetting = Some(forget_view(v));
            }
        }
        Ok(RecallOutcome {
            memories,
            actions: items.actions.into_iter().map(item).collect(),
            self_knowledge: items.self_knowledge.into_iter().map(item).collect(),
            core: items.core.into_iter().map(item).collect(),
            queries: self.queries.len(),
            lock,
        })
    }
}

/// Runs a recall on a graph handle: under the read lock when the index and the decay factors
/// of now are current (recalls of one character then run side by side and never wait for
/// each other), else under the write lock, which builds them first. Everything is decoded
/// and checked before anything changes.
fn run(handle: &Handle, request: &RecallRequest<'_>) -> Result<RecallOutcome, NifError> {
    let forgetting = term::given(request.forgetting)
        .map(decode_forgetting)
        .transpose()?;
    if forgetting.is_none() {
        let engine = handle.read()?;
        let (recall, config) = decode(handle, &engine, request)?;
        if recall.is_empty() {
            return recall.outcome(&engine, None, atoms::read());
        }
        if let Some(result) =
            engine.recall_shared(&recall.queries, &config, recall.short.clone(), recall.now)?
        {
            return recall.outcome(&engine, Some(&result), atoms::read());
        }
    }
    let mut engine = handle.write()?;
    run_exclusive(
        handle,
        &mut engine,
        request,
        forgetting,
        |engine, recall, config| {
            engine.recall_at(&recall.queries, config, recall.short.clone(), recall.now)
        },
    )
}

/// Runs a request on an exclusive borrow of `engine` (of `handle`): decodes and checks it,
/// sets the `forgetting` parameters when given, then runs `pipeline` unless there is nothing
/// to search for.
pub(crate) fn run_exclusive(
    handle: &Handle,
    engine: &mut Engine,
    request: &RecallRequest<'_>,
    forgetting: Option<ForgetConfig>,
    pipeline: impl FnOnce(
        &mut Engine,
        &Recall,
        &PipelineConfig,
    ) -> soul_mem_core::Result<PipelineResult>,
) -> Result<RecallOutcome, NifError> {
    let (recall, config) = decode(handle, engine, request)?;
    if let Some(cfg) = forgetting {
        engine.set_forget_config(cfg)?;
    }
    if recall.is_empty() {
        return recall.outcome(engine, None, atoms::write());
    }
    let result = pipeline(engine, &recall, &config)?;
    recall.outcome(engine, Some(&result), atoms::write())
}

/// One recall (see [`RecallRequest`]): `{:ok, %{memories, actions, self_knowledge, core,
/// queries, lock}}`. Without sub-queries only the core notes come back (a request's own
/// config is still checked).
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_recall<'a>(env: Env<'a>, handle: Handle, request: RecallRequest<'a>) -> Term<'a> {
    ok_or_error(env, run(&handle, &request))
}

/// Sets the character's recall defaults and/or forgetting parameters (see
/// [`Configuration`]); invalid ones change nothing.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_configure<'a>(
    env: Env<'a>,
    handle: Handle,
    configuration: Configuration<'a>,
) -> Term<'a> {
    let result = (|| {
        let recall = term::given(configuration.recall)
            .map(decode_config)
            .transpose()?;
        let forgetting = term::given(configuration.forgetting)
            .map(decode_forgetting)
            .transpose()?;
        if let Some(cfg) = forgetting {
            handle.write()?.set_forget_config(cfg)?;
        }
        if let Some(defaults) = recall {
            handle.set_recall_defaults(defaults)?;
        }
        Ok(())
    })();
    ok_or_error(env, result.map(|()| rustler::types::atom::ok()))
}

/// The core notes as items (stage `"Core"`), for a recall that runs no retrieval.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_core<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let result = handle.read().map(|engine| {
        engine
            .core_items()
            .into_iter()
            .map(item)
            .collect::<Vec<_>>()
    });
    ok_or_error(env, result)
}

/// Records one retrieval of each note (readable ids or UUIDs) at `at_ms` (Unix ms). Unknown
/// ids are skipped; returns how many were recorded. Dirty: it takes the write lock.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_record<'a>(env: Env<'a>, handle: Handle, ids: Vec<String>, at_ms: i64) -> Term<'a> {
    let result = (|| {
        let at = at(at_ms, "at")?;
        let mut engine = handle.write()?;
        let resolved: Vec<_> = ids
            .iter()
            .filter_map(|id| engine.graph().resolve(id))
            .collect();
        Ok(engine.record(&resolved, at))
    })();
    ok_or_error(env, result)
}

/// Plain text → seed-shaped sub-queries (maps with string keys), without an LLM.
#[rustler::nif(schedule = "DirtyCpu")]
fn text_queries<'a>(env: Env<'a>, text: String, max_keywords: usize) -> Term<'a> {
    let queries = soul_mem_core::text::text_queries(&text, max_keywords);
    ok_or_error(env, term::encode(env, &queries))
}

/// jieba segmentation (HMM on).
#[rustler::nif(schedule = "DirtyCpu")]
fn text_tokens(text: String) -> Vec<String> {
    soul_mem_core::text::tokens(&text)
        .into_iter()
        .map(str::to_owned)
        .collect()
}
