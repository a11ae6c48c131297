//! GPT-2 inference on kernels rocmc compiled in this crate's build script,
//! on any device: `cpu`, `cuda:N`, `amdgpu:N`, or a worker's
//! `remote://HOST:PORT/DEVICE`. Token ids in, token ids out (no
//! tokenizer): a prefill of the prompt, then greedy decoding against a
//! KV cache, with timings.
//!
//! ```text
//! gpt2 --weights model.safetensors --device cuda:0 --ids 464,2068,7586 --new 32
//! ```

mod model;
mod weights;

/// The launchers `build.rs` wrote.
#[allow(clippy::all)]
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/rocmc_kernels.rs"));
}

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The device or a kernel launch.
    Device(rocmc_device::Error),
    /// The weights file.
    Weights(String),
    /// The command line.
    Usage(String),
    /// Writing an output.
    Io(String),
}

impl From<rocmc_device::Error> for Error {
    fn from(e: rocmc_device::Error) -> Error {
        Error::Device(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Device(e) => write!(f, "{e}"),
            Error::Weights(m) | Error::Usage(m) | Error::Io(m) => f.write_str(m),
        }
    }
}

#[derive(Parser)]
#[command(about = "GPT-2 inference on rocmc kernels, on any device")]
struct Args {
    /// Weights in Hugging Face's GPT-2 layout (.safetensors); the head
    /// count and epsilon come from the config.json beside it.
    #[arg(long)]
    weights: PathBuf,
    /// cpu, cuda:N, amdgpu:N or remote://HOST:PORT/DEVICE.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// The prompt's token ids, comma-separated (every sequence of the
    /// batch gets the same prompt unless --ids-file gives one per line).
    #[arg(long, value_delimiter = ',')]
    ids: Vec<i32>,
    /// A file of prompts, one sequence per line (ids separated by commas
    /// or spaces; every line as long as the first).
    #[arg(long)]
    ids_file: Option<PathBuf>,
    /// Sequences in the batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Tokens to generate per sequence (the first from the prefill).
    #[arg(long, default_value_t = 16)]
    new: usize,
    /// Heads, when there is no config.json beside the weights.
    #[arg(long)]
    heads: Option<usize>,
    /// Writes the prefill's logits, [batch, prompt length, vocab] f32, as .npy.
    #[arg(long)]
    logits: Option<PathBuf>,
    /// Prints each kernel's share of the time (every launch synchronised).
    #[arg(long)]
    profile: bool,
    /// Untimed runs of the prefill and decoding before the timed ones.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Timed runs; the median of each phase is reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

/// One prefill and decoding: each sequence's tokens, the decoding steps,
/// and each phase's seconds.
struct Generated {
    tokens: Vec<Vec<i32>>,
    steps: usize,
    prefill: f64,
    decode: f64,
}

/// Runs the prefill of `ids` and greedy decoding from it.
fn generate(
    a: &Args,
    dev: &mut dyn rocmc_device::Device,
    m: &mut model::Model,
    ids: &[i32],
    logits_to: Option<&PathBuf>,
) -> Result<Generated, Error> {
    let c = m.weights.config;
    let s = ids.len() / a.batch;
    m.reset();
    dev.synchronize()?;
    let t0 = Instant::now();
    let (logits, mut next) = m.step(dev, ids)?;
    dev.synchronize()?;
    let prefill = t0.elapsed().as_secs_f64();
    if let Some(path) = logits_to {
        let l = logits.read(dev)?;
        write_npy(path, &[a.batch as u64, s as u64, c.vocab as u64], &l)?;
    }
    let mut out: Vec<Vec<i32>> = next.iter().map(|&t| vec![t]).collect();
    let steps = a.new.saturating_sub(1).min(c.positions.saturating_sub(s));
    let t0 = Instant::now();
    for _ in 0..steps {
        let (_, n) = m.step(dev, &next)?;
        for (o, t) in out.iter_mut().zip(&n) {
            o.push(*t);
        }
        next = n;
    }
    dev.synchronize()?;
    Ok(Generated {
        tokens: out,
        steps,
        prefill,
        decode: t0.elapsed().as_secs_f64(),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn prompts(a: &Args) -> Result<Vec<i32>, Error> {
    let Some(file) = &a.ids_file else {
        if a.ids.is_empty() {
            return Err(Error::Usage("give --ids or --ids-file".into()));
        }
        return Ok((0..a.batch).flat_map(|_| a.ids.iter().copied()).collect());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("{}: {e}", file.display())))?;
    let mut all = Vec::new();
    let mut lines = 0;
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let row: Vec<i32> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse().map_err(|_| {
                    Error::Usage(format!(
                        "{}:{}: `{s}` is not a token id",
                        file.display(),
                        n + 1
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        if n > 0 && row.len() * n != all.len() {
            return Err(Error::Usage(format!(
                "{}:{}: {} ids, but the first line has {}",
                file.display(),
                n + 1,
                row.len(),
                all.len() / n
            )));
        }
        all.extend(row);
        lines += 1;
    }
    if lines != a.batch {
        return Err(Error::Usage(format!(
            "{}: {lines} prompts for --batch {}",
            file.display(),
            a.batch
        )));
    }
    Ok(all)
}

use npyz::WriterBuilder as _;

fn write_npy(path: &PathBuf, shape: &[u64], data: &[f32]) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}

fn run(a: &Args) -> Result<(), Error> {
    let ids = prompts(a)?;
    let mut dev = rocmc_runtime::open(&a.device)?;
    let dev = dev.as_mut();
    let t0 = Instant::now();
    let weights = weights::load(dev, &a.weights, a.heads)?;
    let c = weights.config;
    let mut m = model::Model::new(dev, weights, a.batch)?;
    dev.synchronize()?;
    println!(
        "device {} ({}): GPT-2 with {} layers, width {}, {} heads, vocabulary {}; loaded in {:.2} s",
        dev.info().name,
        dev.info().description,
        c.layers,
        c.width,
        c.heads,
        c.vocab,
        t0.elapsed().as_secs_f64()
    );
    let s = ids.len() / a.batch;
    for _ in 0..a.warmup {
        generate(a, dev, &mut m, &ids, None)?;
    }
    if a.profile {
        m.profile = Some(Vec::new());
    }
    let (mut pre, mut dec) = (Vec::new(), Vec::new());
    let mut first = None;
    for r in 0..a.runs.max(1) {
        let g = generate(a, dev, &mut m, &ids, a.logits.as_ref().filter(|_| r == 0))?;
        pre.push(g.prefill);
        dec.push(g.decode);
        first.get_or_insert((g.tokens, g.steps));
    }
    let (out, steps) = first.expect("one run at least");
    let (prefill, decode) = (median(pre), median(dec));
    for (b, o) in out.iter().enumerate() {
        let ids: Vec<String> = o.iter().map(i32::to_string).collect();
        println!("sequence {b}: {}", ids.join(","));
    }
    println!(
        "prefill: {} x {s} tokens in {:.3} ms (median of {} runs)",
        a.batch,
        prefill * 1e3,
        a.runs.max(1)
    );
    if steps > 0 {
        println!(
            "decode: {steps} steps of {} tokens in {:.3} ms ({:.3} ms per step, {:.1} tokens/s)",
            a.batch,
            decode * 1e3,
            decode * 1e3 / steps as f64,
            (steps * a.batch) as f64 / decode
        );
    }
    if let Some(p) = &m.profile {
        let total: f64 = p.iter().map(|(_, t)| t).sum();
        println!("time per kernel (every launch synchronised):");
        for (name, t) in p {
            println!(
                "  {name:<24} {:>10.3} ms  {:>5.1} %",
                t * 1e3,
                100.0 * t / total
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpt2: {e}");
            ExitCode::FAILURE
        }
    }
}
