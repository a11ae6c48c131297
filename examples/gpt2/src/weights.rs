//! GPT-2's weights from a `.safetensors` file in Hugging Face's layout
//! (`GPT2LMHeadModel.save_pretrained`), as f16 on the device.

use crate::Error;
use rocmc_device::{f16, Device, Tensor};
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// The model's shape.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Positions the position embedding has.
    pub positions: usize,
    /// Layer norms' epsilon.
    pub eps: f32,
}

impl Config {
    /// The head dimension.
    pub fn head_dim(&self) -> usize {
        self.width / self.heads
    }
}

/// One transformer block's weights (Conv1D weights are `[in, out]`).
pub struct Block {
    pub ln1: (Tensor<f16>, Tensor<f16>),
    pub attn: (Tensor<f16>, Tensor<f16>),
    pub proj: (Tensor<f16>, Tensor<f16>),
    pub ln2: (Tensor<f16>, Tensor<f16>),
    pub fc: (Tensor<f16>, Tensor<f16>),
    pub out: (Tensor<f16>, Tensor<f16>),
}

/// Every weight, on one device.
pub struct Weights {
    pub config: Config,
    pub wte: Tensor<f16>,
    pub wpe: Tensor<f16>,
    pub blocks: Vec<Block>,
    pub ln_f: (Tensor<f16>, Tensor<f16>),
}

/// The file's tensors by name, with `transformer.` (the prefix
/// `GPT2LMHeadModel` adds) taken off.
struct File<'a> {
    st: SafeTensors<'a>,
    path: String,
}

impl File<'_> {
    fn find(&self, name: &str) -> Result<safetensors::tensor::TensorView<'_>, Error> {
        self.st
            .tensor(name)
            .or_else(|_| self.st.tensor(&format!("transformer.{name}")))
            .map_err(|_| Error::Weights(format!("{}: no tensor `{name}`", self.path)))
    }

    /// Tensor `name`, checked to have `shape`, as f16 values.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f16>, Error> {
        let t = self.find(name)?;
        if t.shape() != shape {
            return Err(Error::Weights(format!(
                "{}: `{name}` has shape {:?}, expected {shape:?}",
                self.path,
                t.shape()
            )));
        }
        let d = t.data();
        Ok(match t.dtype() {
            Dtype::F16 => d
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
            Dtype::BF16 => d
                .chunks_exact(2)
                .map(|b| f16::from_f32(rocmc_device::bf16::from_le_bytes([b[0], b[1]]).to_f32()))
                .collect(),
            Dtype::F32 => d
                .chunks_exact(4)
                .map(|b| f16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            other => {
                return Err(Error::Weights(format!(
                    "{}: `{name}` is {other:?}; f16, bf16 or f32 weights are read",
                    self.path
                )))
            }
        })
    }

    fn shape(&self, name: &str) -> Result<Vec<usize>, Error> {
        Ok(self.find(name)?.shape().to_vec())
    }
}

/// Reads `path`; the number of heads and epsilon come from the
/// `config.json` beside it when there is one, else from `heads` and 1e-5.
pub fn load(dev: &mut dyn Device, path: &Path, heads: Option<usize>) -> Result<Weights, Error> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::Weights(format!("{p}: {e}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| Error::Weights(format!("{p}: {e}")))?;
    let f = File {
        st,
        path: p.clone(),
    };
    let (vocab, width) = match f.shape("wte.weight")?[..] {
        [v, c] => (v, c),
        _ => return Err(Error::Weights(format!("{p}: wte.weight is not a matrix"))),
    };
    let positions = f.shape("wpe.weight")?[0];
    let layers = (0..)
        .take_while(|l| f.find(&format!("h.{l}.ln_1.weight")).is_ok())
        .count();
    let json = path.with_file_name("config.json");
    let cfg: Option<serde_json::Value> = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let field = |k: &str| cfg.as_ref().and_then(|c| c.get(k)).and_then(|v| v.as_f64());
    let heads = heads
        .or(field("n_head").map(|h| h as usize))
        .ok_or_else(|| Error::Weights(format!("{p}: no config.json beside it; give --heads")))?;
    if heads == 0 || width % heads != 0 || width % 8 != 0 {
        return Err(Error::Weights(format!(
            "width {width} with {heads} heads: the width must be a multiple of 8 and of the head count"
        )));
    }
    let config = Config {
        layers,
        width,
        heads,
        vocab,
        positions,
        eps: field("layer_norm_epsilon").unwrap_or(1e-5) as f32,
    };
    let c = width;
    // GPT-2's Conv1D weights are [in, out]; the GEMMs read them as [out,
    // in] (k contiguous, as nn.Linear stores them), transposed here once.
    let mut up = |name: &str, shape: &[usize], transpose: bool| -> Result<Tensor<f16>, Error> {
        let w = f.get(name, shape)?;
        if !transpose {
            return Ok(Tensor::upload(dev, &w)?);
        }
        let (i, o) = (shape[0], shape[1]);
        let mut t = vec![f16::ZERO; w.len()];
        for (r, row) in w.chunks_exact(o).enumerate() {
            for (c, x) in row.iter().enumerate() {
                t[c * i + r] = *x;
            }
        }
        Ok(Tensor::upload(dev, &t)?)
    };
    let mut pair =
        |pre: &str, w: &[usize], b: usize| -> Result<(Tensor<f16>, Tensor<f16>), Error> {
            Ok((
                up(&format!("{pre}.weight"), w, w.len() == 2)?,
                up(&format!("{pre}.bias"), &[b], false)?,
            ))
        };
    let mut blocks = Vec::new();
    for l in 0..layers {
        let h = format!("h.{l}");
        blocks.push(Block {
            ln1: pair(&format!("{h}.ln_1"), &[c], c)?,
            attn: pair(&format!("{h}.attn.c_attn"), &[c, 3 * c], 3 * c)?,
            proj: pair(&format!("{h}.attn.c_proj"), &[c, c], c)?,
            ln2: pair(&format!("{h}.ln_2"), &[c], c)?,
            fc: pair(&format!("{h}.mlp.c_fc"), &[c, 4 * c], 4 * c)?,
            out: pair(&format!("{h}.mlp.c_proj"), &[4 * c, c], c)?,
        });
    }
    let ln_f = pair("ln_f", &[c], c)?;
    let wte = up("wte.weight", &[vocab, c], false)?;
    let wpe = up("wpe.weight", &[positions, c], false)?;
    Ok(Weights {
        config,
        wte,
        wpe,
        blocks,
        ln_f,
    })
}
