//! The forward pass: a step of S new tokens per sequence (the prompt, or
//! one token while decoding) through every block, against a KV cache.

use crate::kernels::*;
use crate::weights::{Config, Weights};
use crate::Error;
use rocmc_device::{f16, Device, Tensor};
use std::time::Instant;

/// The kernels whose code depends on the head dimension: the KV store,
/// the attention and the head merge.
enum Heads {
    D16(
        (
            kv_store_d16::KvStoreD16,
            attention_d16::AttentionD16,
            merge_heads_d16::MergeHeadsD16,
        ),
    ),
    D64(
        (
            kv_store_d64::KvStoreD64,
            attention_d64::AttentionD64,
            merge_heads_d64::MergeHeadsD64,
        ),
    ),
}

/// Launches kernel `$i` of the head dimension that was loaded (their
/// launchers take the same arguments).
macro_rules! heads {
    ($h:expr, $i:tt, $dev:expr, $($arg:expr),*) => {
        match $h {
            Heads::D16(k) => k.$i.launch($dev, $($arg),*),
            Heads::D64(k) => k.$i.launch($dev, $($arg),*),
        }
    };
}

/// Every kernel, loaded on the model's device.
struct Kernels {
    embed: embed::Embed,
    layernorm: layernorm::Layernorm,
    linear: linear::Linear,
    linear_gelu: linear_gelu::LinearGelu,
    linear_residual: linear_residual::LinearResidual,
    lm_head: lm_head::LmHead,
    argmax: argmax::Argmax,
    heads: Heads,
}

/// Token counts whose activations stay allocated at once.
const SCRATCHES: usize = 2;

/// Buffers of one step's activations, for `tokens` rows.
struct Scratch {
    tokens: usize,
    ids: Tensor<i32>,
    pos: Tensor<i32>,
    x: Tensor<f32>,
    x2: Tensor<f32>,
    a: Tensor<f16>,
    qkv: Tensor<f16>,
    o: Tensor<f16>,
    m: Tensor<f16>,
    f: Tensor<f16>,
    logits: Tensor<f32>,
    /// The greedy token of each sequence (the first `batch` of these).
    next: Tensor<i32>,
}

impl Scratch {
    fn new(dev: &mut dyn Device, c: &Config, t: usize) -> Result<Scratch, Error> {
        let w = c.width;
        Ok(Scratch {
            tokens: t,
            ids: Tensor::zeros(dev, t)?,
            pos: Tensor::zeros(dev, t)?,
            x: Tensor::zeros(dev, t * w)?,
            x2: Tensor::zeros(dev, t * w)?,
            a: Tensor::zeros(dev, t * w)?,
            qkv: Tensor::zeros(dev, t * 3 * w)?,
            o: Tensor::zeros(dev, t * w)?,
            m: Tensor::zeros(dev, t * w)?,
            f: Tensor::zeros(dev, t * 4 * w)?,
            logits: Tensor::zeros(dev, t * c.vocab)?,
            next: Tensor::zeros(dev, t)?,
        })
    }

    fn free(self, dev: &mut dyn Device) -> Result<(), Error> {
        for t in [self.ids, self.pos, self.next] {
            t.free(dev)?;
        }
        for t in [self.x, self.x2, self.logits] {
            t.free(dev)?;
        }
        for t in [self.a, self.qkv, self.o, self.m, self.f] {
            t.free(dev)?;
        }
        Ok(())
    }
}

/// A model on a device, with the KV cache of `batch` sequences.
pub struct Model {
    pub weights: Weights,
    kernels: Kernels,
    batch: usize,
    /// Positions already in the cache.
    past: usize,
    /// Per block: keys and values, `[position, batch, head, dim]`.
    cache: Vec<(Tensor<f16>, Tensor<f16>)>,
    /// Activations by tokens per step, the newest last: a prefill's and a
    /// decoding step's stay allocated, so neither pays for allocation.
    scratch: Vec<Scratch>,
    /// Seconds each kernel's launches took (only with `profile`).
    pub profile: Option<Vec<(&'static str, f64)>>,
}

impl Model {
    /// Loads the kernels and makes a KV cache for `batch` sequences of up
    /// to the model's positions.
    pub fn new(dev: &mut dyn Device, weights: Weights, batch: usize) -> Result<Model, Error> {
        let c = weights.config;
        let heads = match c.head_dim() {
            16 => Heads::D16((
                kv_store_d16::KvStoreD16::load(dev)?,
                attention_d16::AttentionD16::load(dev)?,
                merge_heads_d16::MergeHeadsD16::load(dev)?,
            )),
            64 => Heads::D64((
                kv_store_d64::KvStoreD64::load(dev)?,
                attention_d64::AttentionD64::load(dev)?,
                merge_heads_d64::MergeHeadsD64::load(dev)?,
            )),
            d => {
                return Err(Error::Weights(format!(
                "head dimension {d}: this program has kernels for 16 and 64 (build.rs HEAD_DIMS)"
            )))
            }
        };
        let kernels = Kernels {
            embed: embed::Embed::load(dev)?,
            layernorm: layernorm::Layernorm::load(dev)?,
            linear: linear::Linear::load(dev)?,
            linear_gelu: linear_gelu::LinearGelu::load(dev)?,
            linear_residual: linear_residual::LinearResidual::load(dev)?,
            lm_head: lm_head::LmHead::load(dev)?,
            argmax: argmax::Argmax::load(dev)?,
            heads,
        };
        let per = c.positions * batch * c.width;
        let mut cache = Vec::new();
        for _ in 0..c.layers {
            cache.push((Tensor::zeros(dev, per)?, Tensor::zeros(dev, per)?));
        }
        Ok(Model {
            weights,
            kernels,
            batch,
            past: 0,
            cache,
            scratch: Vec::new(),
            profile: None,
        })
    }

    /// Forgets the cache: the next step starts new sequences.
    pub fn reset(&mut self) {
        self.past = 0;
    }

    /// Runs `ids` (`batch` sequences of `ids.len() / batch` new tokens,
    /// row-major) through the model, appending them to the cache. Returns
    /// the logits of every new token (`[batch · S, vocab]`, on the device)
    /// and each sequence's greedy next token.
    pub fn step(
        &mut self,
        dev: &mut dyn Device,
        ids: &[i32],
    ) -> Result<(Tensor<f32>, Vec<i32>), Error> {
        let c = self.weights.config;
        let b = self.batch;
        if ids.is_empty() || !ids.len().is_multiple_of(b) {
            return Err(Error::Usage(format!(
                "{} token ids for a batch of {b}",
                ids.len()
            )));
        }
        let s = ids.len() / b;
        if self.past + s > c.positions {
            return Err(Error::Usage(format!(
                "{} positions past {} would exceed the model's {}",
                s, self.past, c.positions
            )));
        }
        if let Some(bad) = ids.iter().find(|&&t| t < 0 || t as usize >= c.vocab) {
            return Err(Error::Usage(format!(
                "token id {bad} is outside the vocabulary 0..{}",
                c.vocab
            )));
        }
        let t = ids.len();
        let i = match self.scratch.iter().position(|sc| sc.tokens == t) {
            Some(i) => i,
            None => {
                if self.scratch.len() == SCRATCHES {
                    self.scratch.remove(0).free(dev)?;
                }
                self.scratch.push(Scratch::new(dev, &c, t)?);
                self.scratch.len() - 1
            }
        };
        let sc = &self.scratch[i];
        let pos: Vec<i32> = (0..t).map(|r| (self.past + r % s) as i32).collect();
        sc.ids.write(dev, ids)?;
        sc.pos.write(dev, &pos)?;
        let k = &self.kernels;
        let w = &self.weights;
        let (ti, ci, hi) = (t as i32, c.width as i32, c.heads as i32);
        let (bi, si, pi) = (b as i32, s as i32, self.past as i32);
        let mut prof = self.profile.take();
        let mut mark = Mark::new(dev, prof.is_some())?;
        k.embed.launch(
            dev,
            &sc.ids,
            &sc.pos,
            &w.wte,
            &w.wpe,
            &sc.x,
            ti,
            c.vocab as i32,
            c.positions as i32,
            ci,
        )?;
        mark.done(dev, &mut prof, "embed")?;
        let row = b * c.width;
        for (blk, (kc, vc)) in w.blocks.iter().zip(&self.cache) {
            k.layernorm
                .launch(dev, &sc.x, &blk.ln1.0, &blk.ln1.1, &sc.a, ti, ci, c.eps)?;
            mark.done(dev, &mut prof, "layernorm")?;
            k.linear.launch(
                dev,
                &sc.a,
                &blk.attn.0,
                &blk.attn.1,
                &sc.qkv,
                ti,
                3 * ci,
                ci,
            )?;
            mark.done(dev, &mut prof, "qkv linear")?;
            let (kn, vn) = (
                kc.view(self.past * row, s * row)?,
                vc.view(self.past * row, s * row)?,
            );
            heads!(&k.heads, 0, dev, &sc.qkv, &kn, &vn, bi, si, hi)?;
            mark.done(dev, &mut prof, "kv store")?;
            let n = (self.past + s) * row;
            let (ka, va) = (kc.view(0, n)?, vc.view(0, n)?);
            heads!(&k.heads, 1, dev, &sc.qkv, &ka, &va, &sc.o, bi, hi, si, pi)?;
            mark.done(dev, &mut prof, "attention")?;
            heads!(&k.heads, 2, dev, &sc.o, &sc.m, bi, hi, si)?;
            mark.done(dev, &mut prof, "merge heads")?;
            k.linear_residual.launch(
                dev,
                &sc.x,
                &sc.m,
                &blk.proj.0,
                &blk.proj.1,
                &sc.x2,
                ti,
                ci,
                ci,
            )?;
            mark.done(dev, &mut prof, "proj linear + residual")?;
            k.layernorm
                .launch(dev, &sc.x2, &blk.ln2.0, &blk.ln2.1, &sc.a, ti, ci, c.eps)?;
            mark.done(dev, &mut prof, "layernorm")?;
            k.linear_gelu
                .launch(dev, &sc.a, &blk.fc.0, &blk.fc.1, &sc.f, ti, 4 * ci, ci)?;
            mark.done(dev, &mut prof, "fc linear + gelu")?;
            k.linear_residual.launch(
                dev,
                &sc.x2,
                &sc.f,
                &blk.out.0,
                &blk.out.1,
                &sc.x,
                ti,
                ci,
                4 * ci,
            )?;
            mark.done(dev, &mut prof, "mlp proj + residual")?;
        }
        k.layernorm
            .launch(dev, &sc.x, &w.ln_f.0, &w.ln_f.1, &sc.a, ti, ci, c.eps)?;
        mark.done(dev, &mut prof, "layernorm")?;
        k.lm_head
            .launch(dev, &sc.a, &w.wte, &sc.logits, ti, c.vocab as i32, ci)?;
        mark.done(dev, &mut prof, "lm head")?;
        k.argmax
            .launch(dev, &sc.logits, &sc.next, bi, si, c.vocab as i32)?;
        mark.done(dev, &mut prof, "argmax")?;
        self.profile = prof;
        let mut next = sc.next.read(dev)?;
        next.truncate(b);
        self.past += s;
        Ok((sc.logits, next))
    }
}

/// Per-kernel wall time, where asked: each launch synchronised.
struct Mark {
    at: Option<Instant>,
}

impl Mark {
    fn new(dev: &mut dyn Device, on: bool) -> Result<Mark, Error> {
        if on {
            dev.synchronize()?;
        }
        Ok(Mark {
            at: on.then(Instant::now),
        })
    }

    fn done(
        &mut self,
        dev: &mut dyn Device,
        prof: &mut Option<Vec<(&'static str, f64)>>,
        what: &'static str,
    ) -> Result<(), Error> {
        let (Some(at), Some(p)) = (self.at, prof.as_mut()) else {
            return Ok(());
        };
        dev.synchronize()?;
        let s = at.elapsed().as_secs_f64();
        match p.iter_mut().find(|(n, _)| *n == what) {
            Some((_, t)) => *t += s,
            None => p.push((what, s)),
        }
        self.at = Some(Instant::now());
        Ok(())
    }
}
