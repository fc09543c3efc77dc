//! Rebuilding a graph's vectors after the graph changed ([`VectorPlan`]): notes whose texts
//! did not change keep their rows and only new and changed notes reach the embedder. When the
//! old vectors can be given up and the graph only lost notes and gained some at its end —
//! what working memory does on every activation and release, the notes at the end including
//! released ones loaded again — the kept rows are compacted in place instead of copied into
//! fresh buffers (copying ~1,000 notes' rows into new allocations, twice per recall, was a
//! fifth of a working-memory recall at 100k notes).

use super::{signature_of, NodeVectors, Removed, ROW_KINDS_LEN};
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{IdMap, MemoryId};
use crate::retrieval::dot::l2_normalise;
use crate::retrieval::field_texts::{node_texts, FieldKind};
use crate::retrieval::text_embedder::{embed_distinct, EmbedKind, TextEmbedder};

/// One note of the new graph: the old node whose rows it keeps, the rows it had when it was
/// removed lately (with the index of each tag's vector), or its `(field, text, index of the
/// text's vector)` items.
enum Step {
    Keep(usize),
    Recent(Removed, Vec<usize>),
    Embed(Vec<(FieldKind, String, usize)>),
}

/// Where a note's rows come from, before the embedder ran: [`Step`] with, for a remembered
/// note, each tag's id in the old vocabulary (`None`: no longer there, embedded).
enum Source<'p> {
    Keep(usize),
    Recent(&'p Removed, Vec<Option<u32>>),
    Embed(Vec<(FieldKind, String)>),
}

/// The vectors of a changed graph, embedded but not yet assembled: the fallible part (the
/// embedder) is done, so a caller gives the old vectors up only once nothing can fail.
pub struct VectorPlan {
    dim: usize,
    // The old vectors this plan refers to: their length (checked when assembling).
    prev_len: Option<usize>,
    steps: Vec<Step>,
    ids: Vec<MemoryId>,
    revisions: Vec<u64>,
    vectors: Vec<Vec<f32>>,
}

impl VectorPlan {
    /// Plans the vectors of `graph` against `prev` (vectors of the same embedder; ignored when
    /// of another dimension) and embeds what it cannot reuse: a note whose content revision is
    /// the one its old rows were made from keeps them without its texts being read; otherwise
    /// an equal text fingerprint still keeps them. A note new to the graph whose rows `prev`
    /// remembers from its removal ([`super::RECENT_NODES`] at most), made from the same texts,
    /// gets them back, and its tags' vectors from `prev`'s vocabulary (a tag no longer in it
    /// is embedded). Identical texts are embedded once.
    ///
    /// Complexity: O(text of the new and changed notes) plus one embedder call over the
    /// distinct texts not remembered; O(nodes) hash lookups.
    pub fn new(
        graph: &MemoryGraph,
        embedder: &dyn TextEmbedder,
        prev: Option<&NodeVectors>,
    ) -> Result<Self> {
        let dim = embedder.dim();
        let prev = prev.filter(|p| p.dim == dim);
        let prev_pos: IdMap<usize> = prev
            .map(|p| p.ids.iter().enumerate().map(|(j, id)| (*id, j)).collect())
            .unwrap_or_default();
        let mut texts: Vec<Source> = Vec::with_capacity(graph.len());
        let mut revisions = Vec::with_capacity(graph.len());
        for note in graph.notes() {
            let j = prev_pos.get(&note.id).copied();
            let rev = graph.content_revision(&note.id).unwrap_or(0);
            revisions.push(rev);
            if let (Some(j), Some(p)) = (j, prev) {
                if rev != 0 && p.revisions[j] == rev {
                    texts.push(Source::Keep(j));
                    continue;
                }
            }
            let items = node_texts(note);
            let sig = signature_of(items.iter().map(|(k, t)| (*k, t.as_str())));
            texts.push(match (j, prev) {
                (Some(j), Some(p)) if p.signatures[j] == sig => Source::Keep(j),
                (None, Some(p)) => match remembered(p, &note.id, sig) {
                    Some((r, tags)) => Source::Recent(r, tags),
                    None => Source::Embed(items),
                },
                _ => Source::Embed(items),
            });
        }
        // Every text of a note embedded anew; of a remembered note, its tags gone from the
        // vocabulary.
        let mut wanted: Vec<&str> = Vec::new();
        for s in &texts {
            match s {
                Source::Embed(items) => wanted.extend(items.iter().map(|(_, t)| t.as_str())),
                Source::Recent(r, tags) => wanted.extend(
                    r.tags
                        .iter()
                        .zip(tags)
                        .filter(|(_, t)| t.is_none())
                        .map(|(text, _)| text.as_str()),
                ),
                Source::Keep(_) => {}
            }
        }
        let (distinct, mut vectors) = embed_distinct(embedder, wanted, EmbedKind::Passage)?;
        let mut steps = Vec::with_capacity(texts.len());
        for t in &texts {
            steps.push(match t {
                Source::Keep(j) => Step::Keep(*j),
                Source::Recent(r, tags) => {
                    // Each tag's vector, normalised, is copied now: from the old vocabulary
                    // (which may lose it when the old vectors are compacted) or as embedded.
                    let mut at = Vec::with_capacity(tags.len());
                    for (text, t) in r.tags.iter().zip(tags) {
                        let v = match (t, prev) {
                            (Some(t), Some(p)) => p.tag_vector(*t as usize).to_vec(),
                            _ => {
                                let i = distinct.get(text.as_str()).copied().ok_or_else(|| {
                                    Error::invalid_argument("embedder", "a text was not embedded")
                                })?;
                                let mut v = vectors[i].clone();
                                l2_normalise(&mut v);
                                v
                            }
                        };
                        vectors.push(v);
                        at.push(vectors.len() - 1);
                    }
                    Step::Recent((*r).clone(), at)
                }
                Source::Embed(items) => Step::Embed(
                    items
                        .iter()
                        .map(|(k, text)| {
                            let v = distinct.get(text.as_str()).copied().ok_or_else(|| {
                                Error::invalid_argument("embedder", "a text was not embedded")
                            })?;
                            Ok((*k, text.clone(), v))
                        })
                        .collect::<Result<_>>()?,
                ),
            });
        }
        Ok(VectorPlan {
            dim,
            prev_len: prev.map(NodeVectors::len),
            steps,
            ids: graph.notes().map(|n| n.id).collect(),
            revisions,
            vectors,
        })
    }

    /// True when assembling from owned old vectors compacts them in place: the plan starts
    /// with kept notes in their old order (the prefix compacted in place) and keeps fewer
    /// notes after that prefix than in it. Notes kept after it — released and loaded again
    /// before the index was rebuilt, which working memory does whenever a message brings back
    /// what the settle after the previous one released — are copied out of the old rows
    /// before the compaction and appended after it. Complexity: O(nodes).
    pub fn in_place(&self) -> bool {
        let prefix = self.prefix_len();
        let late = self.steps[prefix..]
            .iter()
            .filter(|s| matches!(s, Step::Keep(_)))
            .count();
        prefix > 0 && late < prefix
    }

    /// Leading steps that keep old notes in their old order (strictly ascending positions).
    fn prefix_len(&self) -> usize {
        let mut last = None;
        self.steps
            .iter()
            .take_while(|s| match s {
                Step::Keep(j) if last.is_none_or(|l| *j > l) => {
                    last = Some(*j);
                    true
                }
                _ => false,
            })
            .count()
    }

    /// The new vectors, the kept rows copied from `prev` (the vectors the plan was made
    /// against). Errors when `prev` is not those vectors.
    /// Complexity: O(rows × dim).
    pub fn assemble(self, prev: Option<&NodeVectors>) -> Result<NodeVectors> {
        self.check_prev(prev)?;
        let mut out = NodeVectors::new(self.dim)?;
        self.append(0, &mut out, prev.map(Kept::At))?;
        Ok(out)
    }

    /// [`Self::assemble`] giving up `prev`: compacted in place when [`Self::in_place`] (no
    /// new buffers; the rows kept move down over the dropped ones), copied otherwise. The
    /// rows of the notes `prev` had and the plan drops are remembered for their return
    /// (`recent.rs`, [`super::RECENT_NODES`] at most).
    /// Complexity: O(rows × dim) moved at most.
    pub fn assemble_owned(self, prev: Option<NodeVectors>) -> Result<NodeVectors> {
        self.check_prev(prev.as_ref())?;
        let prev = prev.map(|p| self.remember_dropped(p));
        match prev {
            Some(mut p) if self.in_place() => {
                let prefix = self.prefix_len();
                let keep: Vec<usize> = self.steps[..prefix]
                    .iter()
                    .filter_map(|s| match s {
                        Step::Keep(j) => Some(*j),
                        _ => None,
                    })
                    .collect();
                // The compaction may overwrite the rows of notes kept after the prefix.
                let mut late = NodeVectors::new(self.dim)?;
                for s in &self.steps[prefix..] {
                    if let Step::Keep(j) = s {
                        late.push_node_from(&p, *j);
                    }
                }
                p.compact(&keep);
                self.append(prefix, &mut p, Some(Kept::InOrder(&late, 0)))?;
                Ok(p)
            }
            Some(mut p) => {
                let recent = std::mem::take(&mut p.recent);
                let mut out = self.assemble(Some(&p))?;
                out.recent = recent;
                Ok(out)
            }
            None => self.assemble(None),
        }
    }

    /// `prev` remembering the rows of its notes the plan does not keep. Vectors of another
    /// dimension forget what they remembered: their rows never come back into these.
    /// Complexity: O(nodes) plus O(rows × dim) of the dropped notes.
    fn remember_dropped(&self, mut prev: NodeVectors) -> NodeVectors {
        if prev.dim != self.dim {
            prev.recent = Default::default();
            return prev;
        }
        let mut kept = vec![false; prev.len()];
        for s in &self.steps {
            if let Step::Keep(j) = s {
                if let Some(k) = kept.get_mut(*j) {
                    *k = true;
                }
            }
        }
        let mut recent = std::mem::take(&mut prev.recent);
        for (j, _) in kept.iter().enumerate().filter(|(_, k)| !**k) {
            recent.put(&prev, j);
        }
        prev.recent = recent;
        prev
    }

    fn check_prev(&self, prev: Option<&NodeVectors>) -> Result<()> {
        let len = prev.filter(|p| p.dim == self.dim).map(NodeVectors::len);
        if self.prev_len.is_some() && len != self.prev_len {
            return Err(Error::invalid_argument(
                "prev",
                "not the vectors the plan was made against",
            ));
        }
        Ok(())
    }

    /// Appends the plan's nodes from the `from`-th on to `out`, kept ones copied from `kept`.
    fn append(&self, from: usize, out: &mut NodeVectors, mut kept: Option<Kept<'_>>) -> Result<()> {
        let nodes = self.steps.iter().zip(&self.ids).zip(&self.revisions);
        for ((step, id), rev) in nodes.skip(from) {
            match step {
                Step::Keep(j) => {
                    let (p, at) = match kept.as_mut() {
                        Some(Kept::At(p)) => (*p, *j),
                        Some(Kept::InOrder(p, next)) => {
                            *next += 1;
                            (*p, *next - 1)
                        }
                        None => {
                            return Err(Error::invalid_argument(
                                "prev",
                                "a copy needs the previous vectors",
                            ))
                        }
                    };
                    out.push_node_from(p, at)
                }
                Step::Embed(items) => {
                    let rows: Vec<(FieldKind, &str, &[f32])> = items
                        .iter()
                        .map(|(k, t, v)| (*k, t.as_str(), self.vectors[*v].as_slice()))
                        .collect();
                    out.push_node(*id, &rows)?;
                }
                Step::Recent(r, at) => {
                    let tags: Vec<(&str, &[f32])> = r
                        .tags
                        .iter()
                        .zip(at)
                        .map(|(t, &v)| (t.as_str(), self.vectors[v].as_slice()))
                        .collect();
                    out.push_removed(*id, r, &tags);
                }
            }
            if let Some(r) = out.revisions.last_mut() {
                *r = *rev;
            }
        }
        Ok(())
    }
}

/// The rows `prev` remembers for note `id` removed lately, made from the texts of fingerprint
/// `signature`, with its tags' ids in `prev`'s vocabulary (`None`: no longer there).
fn remembered<'p>(
    prev: &'p NodeVectors,
    id: &MemoryId,
    signature: u64,
) -> Option<(&'p Removed, Vec<Option<u32>>)> {
    let r = prev.recent.get(id, signature)?;
    let tags = r
        .tags
        .iter()
        .map(|t| prev.tag_lookup.get(t).copied())
        .collect();
    Some((r, tags))
}

/// Where [`VectorPlan::append`] copies kept notes from: the old vectors at each note's old
/// position, or the notes copied out before a compaction, in plan order (the next one).
enum Kept<'a> {
    At(&'a NodeVectors),
    InOrder(&'a NodeVectors, usize),
}

impl NodeVectors {
    /// Keeps only nodes `keep` (strictly ascending old positions), in that order: their rows
    /// move down over the dropped ones in the same buffers; the tag vocabulary is rebuilt in
    /// first-use order, as a fresh build makes it. Complexity: O(kept rows × dim + tags).
    fn compact(&mut self, keep: &[usize]) {
        // Every node kept (a working graph that only gained notes): the rows and the tag
        // vocabulary are already what the compaction would make.
        if keep.len() == self.len() {
            return;
        }
        let dim = self.dim;
        let old_starts = std::mem::take(&mut self.starts);
        let span =
            |j: usize, ri: usize| (old_starts[j][ri] as usize, old_starts[j + 1][ri] as usize);
        for (ri, f) in self.fields.iter_mut().enumerate() {
            f.nodes.clear();
            f.ends.clear();
            let mut w = 0usize;
            for (k, &j) in keep.iter().enumerate() {
                let (a, b) = span(j, ri);
                if a != w {
                    f.q8.copy_within(a * dim..b * dim, w * dim);
                    f.scales.copy_within(a..b, w);
                }
                w += b - a;
                if b > a {
                    f.nodes.push(k as u32);
                    f.ends.push(w as u32);
                }
            }
            f.q8.truncate(w * dim);
            f.scales.truncate(w);
        }
        let mut cursor = [0u32; ROW_KINDS_LEN];
        self.starts.reserve(keep.len() + 1);
        self.starts.push(cursor);
        for &j in keep {
            for (ri, c) in cursor.iter_mut().enumerate() {
                let (a, b) = span(j, ri);
                *c += (b - a) as u32;
            }
            self.starts.push(cursor);
        }
        for (k, &j) in keep.iter().enumerate() {
            self.ids[k] = self.ids[j];
            self.signatures[k] = self.signatures[j];
            self.revisions[k] = self.revisions[j];
        }
        self.ids.truncate(keep.len());
        self.signatures.truncate(keep.len());
        self.revisions.truncate(keep.len());

        let mut vocab = std::mem::take(&mut self.tag_vocab);
        let matrix = std::mem::take(&mut self.tag_matrix);
        let offsets = std::mem::take(&mut self.tag_offsets);
        let ids = std::mem::take(&mut self.tag_ids);
        self.tag_lookup.clear();
        self.tag_offsets.push(0);
        let mut remap = vec![u32::MAX; vocab.len()];
        for &j in keep {
            for &t in &ids[offsets[j] as usize..offsets[j + 1] as usize] {
                let t = t as usize;
                if remap[t] == u32::MAX {
                    remap[t] = self.tag_vocab.len() as u32;
                    let text = std::mem::take(&mut vocab[t]);
                    self.tag_lookup.insert(text.clone(), remap[t]);
                    self.tag_vocab.push(text);
                    self.tag_matrix
                        .extend_from_slice(&matrix[t * dim..(t + 1) * dim]);
                }
                // A node's old tag ids are distinct and the remap is one-to-one.
                self.tag_ids.push(remap[t]);
            }
            self.tag_offsets.push(self.tag_ids.len() as u32);
        }
    }
}
