//! The benchmark's inputs drawn on the GPU: a kernel's tensors are
//! allocated on the device and each input is filled there by the fill
//! kernel of its dtype (bench/gpu/fill.toml.in, built by rocmc into the
//! bundle's `fill/`), drawn as the host's draws are
//! (`reference::input_draw`: the same ranges, subscripts within the extent
//! they index). Nothing is made on the host or copied over, so a 2-billion
//! element input costs milliseconds, not minutes.

use crate::{kernels, Placed, Res};
use rocmc_device::launch::LaunchInfo;
use rocmc_ir::reference::{index_ranges, input_draw, random_params, Draw, Rng};
use rocmc_ir::{DType, Kernel, TensorKind};
use std::collections::HashMap;
use std::path::Path;

/// The fill kernels of a folder, one per dtype, loaded on first use.
pub(crate) struct Fills {
    kernels: HashMap<DType, (Kernel, Vec<u8>)>,
    loaded: HashMap<DType, (String, LaunchInfo)>,
}

impl Fills {
    /// The fills `fill_<dtype>.ptx` (with their kernel files) of `dir`.
    pub(crate) fn open(dir: &Path) -> Res<Fills> {
        let mut by_dtype = HashMap::new();
        for (name, k, module) in kernels(dir, "ptx")? {
            let t = name
                .strip_prefix("fill_")
                .and_then(DType::parse)
                .ok_or_else(|| format!("{}: {name} is not a fill_<dtype>", dir.display()))?;
            by_dtype.insert(t, (k, module));
        }
        Ok(Fills {
            kernels: by_dtype,
            loaded: HashMap::new(),
        })
    }

    /// Every tensor of `k` at `sizes` on `dev`: inputs filled with seeded
    /// values, results zeroed; the kernel's parameters drawn as the host
    /// draws them.
    pub(crate) fn place(
        &mut self,
        dev: &mut dyn rocmc_device::Device,
        k: &Kernel,
        sizes: &[i64],
        seed: u64,
    ) -> Res<Placed> {
        let shapes = k
            .tensors
            .iter()
            .map(|t| rocmc_ir::interp::shape_of(t, sizes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let ranges = index_ranges(k, &shapes);
        let mut rng = Rng(seed);
        let (pvals, pbytes) = random_params(k, &HashMap::new(), &mut rng)?;
        let mut placed = Placed {
            ids: Vec::new(),
            lens: Vec::new(),
            pbytes,
            pvals,
        };
        for (i, t) in k.tensors.iter().enumerate() {
            let n = shapes[i].iter().product::<i64>().max(0) as u64;
            let id = dev
                .alloc(n * t.dtype.size() as u64)
                .map_err(|e| format!("{}: {e}", t.name))?;
            placed.ids.push(id);
            placed.lens.push(n);
            if t.kind == TensorKind::Input && n > 0 {
                let draw = input_draw(t.dtype, ranges[i]);
                self.fill(dev, t.dtype, id, n, draw, rng.next_u64() as u32)
                    .map_err(|e| format!("filling `{}`: {e}", t.name))?;
            }
        }
        Ok(placed)
    }

    /// Fills buffer `id` (`n` elements of `t`) on the device.
    fn fill(
        &mut self,
        dev: &mut dyn rocmc_device::Device,
        t: DType,
        id: u32,
        n: u64,
        draw: Draw,
        seed: u32,
    ) -> Res<()> {
        let (k, module) = self
            .kernels
            .get(&t)
            .ok_or_else(|| format!("no fill kernel for {t} (fill_{t}.ptx)"))?;
        if let std::collections::hash_map::Entry::Vacant(e) = self.loaded.entry(t) {
            let info = rocmc_device::module_launch(module).map_err(|e| e.to_string())?;
            let mid = dev.load_module(module).map_err(|e| e.to_string())?;
            e.insert((mid, info));
        }
        let (mid, info) = &self.loaded[&t];
        let (lo, span) = match draw {
            Draw::Float { lo, span } => (lo, span),
            Draw::Int { lo, span } => (lo as f64, span as f64),
        };
        for kl in &info.kernels {
            if let Some(a) = kl
                .args
                .iter()
                .find(|a| a.role == rocmc_device::launch::ArgRole::Buffer && a.name != "O")
            {
                return Err(format!(
                    "fill_{t} stores `{}`: only O may be a buffer",
                    a.name
                ));
            }
        }
        // A size is an i32: a larger tensor is filled in views of 2^30
        // elements (byte offsets aligned for any view), each with its own
        // seed.
        const CHUNK: u64 = 1 << 30;
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start);
            let part_seed = seed.wrapping_add((start / CHUNK) as u32 * 0x9E37_79B9);
            // seed (u32), lo and span (f64), in the fill kernel's order.
            let mut pbytes = Vec::new();
            for p in &k.params {
                let slot: [u8; 8] = match p.name.as_str() {
                    "seed" => u64::from(part_seed).to_le_bytes(),
                    "lo" => lo.to_le_bytes(),
                    "span" => span.to_le_bytes(),
                    other => return Err(format!("fill_{t} has a parameter `{other}`")),
                };
                pbytes.extend(slot);
            }
            let count = k.tensors.len();
            for kl in &info.kernels {
                let mut args = rocmc_remote::device::wire_args(
                    k,
                    kl,
                    &vec![id; count],
                    &vec![len; count],
                    &[len as i64],
                    &pbytes,
                )?;
                for a in &mut args {
                    if let rocmc_remote::proto::WireArg::Buffer { offset, .. } = a {
                        *offset = start;
                    }
                }
                dev.launch(mid, &kl.name, &args)
                    .map_err(|e| e.to_string())?;
            }
            start += len;
        }
        Ok(())
    }
}
