//! `rocmc._rocmc`: the Rust half of the Python package (the Python half,
//! `rocmc/`, marshals arrays and arguments). Devices come from
//! `rocmc-runtime`; each launch is checked against the module's launch
//! document by the device, as for every other caller.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rocmc_device::{Arg, BufferId};

create_exception!(_rocmc, RocmcError, PyException);

fn err(e: impl std::fmt::Display) -> PyErr {
    RocmcError::new_err(e.to_string().trim_end().to_string())
}

/// The package's version (the compiler's and runtimes').
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The module of kernel source `source` (errors cite `name`) for `target`:
/// an AMD code object, PTX text or a CPU shared object; `tune` as
/// `rocmc build --tune` takes it, or empty.
#[cfg(feature = "compiler")]
#[pyfunction]
fn compile(
    py: Python<'_>,
    source: &str,
    name: &str,
    target: &str,
    tune: &str,
) -> PyResult<Py<PyBytes>> {
    let mut opts = rocmc::Options::new(target);
    if !tune.is_empty() {
        opts.tune = rocmc::ir::tune::parse_assignments(tune).map_err(err)?;
    }
    let ts = rocmc::targets(&opts).map_err(err)?;
    if ts.len() != 1 {
        return Err(err(format!(
            "target {target:?}: one target per compile (a module is for one)"
        )));
    }
    let tc = rocmc::toolchain::lookup(&ts[0]);
    let emit = tc.module_emit();
    // Compiling takes milliseconds to seconds: other Python threads run.
    let mut arts = py
        .allow_threads(|| rocmc::compile_for(name, source, &ts, &opts, emit))
        .map_err(err)?;
    let a = arts.remove(0);
    let bytes = if tc.asm_is_module() {
        a.asm.map(String::into_bytes)
    } else {
        a.code_object
    };
    let bytes = bytes.ok_or_else(|| err("the compiler wrote no module (a rocmc bug)"))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// Runs the `rocmc` command line with `argv` (its first item the program
/// name) in this process; returns the exit status.
#[cfg(feature = "compiler")]
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.allow_threads(|| rocmc::cli::main_with(argv)) as i32
}

fn info_dict<'py>(py: Python<'py>, i: &rocmc_device::DeviceInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &i.name)?;
    d.set_item("target", &i.target)?;
    d.set_item("description", &i.description)?;
    d.set_item("memory", i.memory)?;
    Ok(d)
}

/// The devices this machine has.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    rocmc_runtime::list_devices()
        .iter()
        .map(|i| info_dict(py, i))
        .collect()
}

/// One device, opened by name; buffers and modules by the ids it gives.
#[pyclass(unsendable, name = "Device")]
struct Device {
    dev: Box<dyn rocmc_runtime::Device>,
}

#[pymethods]
impl Device {
    #[new]
    fn new(name: &str) -> PyResult<Device> {
        Ok(Device {
            dev: rocmc_runtime::open_local(name).map_err(err)?,
        })
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info_dict(py, self.dev.info())
    }

    /// Loads module bytes; returns its id and its launch document (JSON).
    fn load(&mut self, module: &[u8]) -> PyResult<(String, String)> {
        let doc = rocmc_device::module_launch(module).map_err(err)?;
        let id = self.dev.load_module(module).map_err(err)?;
        Ok((id, doc.to_json()))
    }

    /// A new buffer holding `data`.
    fn upload(&mut self, data: &[u8]) -> PyResult<BufferId> {
        self.dev.upload(data).map_err(err)
    }

    /// The whole of buffer `id`.
    fn read<'py>(&mut self, py: Python<'py>, id: BufferId) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.dev.read_all(id).map_err(err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn free(&mut self, id: BufferId) -> PyResult<()> {
        self.dev.free(id).map_err(err)
    }

    fn synchronize(&mut self) -> PyResult<()> {
        self.dev.synchronize().map_err(err)
    }

    /// The [`Plan`] of a module's launch document (`doc`, JSON) for calls
    /// whose buffers, sizes and scalars come in these orders.
    fn plan(
        &self,
        doc: &str,
        buffers: Vec<String>,
        sizes: Vec<String>,
        scalars: Vec<String>,
    ) -> PyResult<Plan> {
        plan_of(doc, &buffers, &sizes, &scalars).map_err(err)
    }

    /// Runs every kernel of `module` by `plan`: `buffers` are `(0, id,
    /// bytes, elements)` for a buffer of this device or `(1, address,
    /// bytes, elements)` for memory a framework owns (imported for the call,
    /// forgotten after it); `stream` is PyTorch's
    /// `current_stream().cuda_stream` (0: the default stream). Each launch is
    /// checked against the launch document by the device.
    fn call(
        &mut self,
        module: &str,
        plan: &Plan,
        buffers: Vec<(u8, u64, u64, u64)>,
        sizes: Vec<i64>,
        scalars: Vec<Vec<u8>>,
        stream: u64,
    ) -> PyResult<()> {
        let given = [buffers.len(), sizes.len(), scalars.len()];
        if given != plan.counts {
            return Err(err(format!(
                "a call of this plan passes {:?} buffers, sizes and scalars, not {given:?}",
                plan.counts
            )));
        }
        let mut ids = Vec::with_capacity(buffers.len());
        let mut imported = Vec::new();
        let result = (|| {
            for &(kind, a, bytes, _) in &buffers {
                if kind == 1 {
                    // SAFETY: the one caller (rocmc/_launch.py) passes live
                    // tensors of this device, referenced for the call.
                    let id = unsafe { self.dev.import(a, bytes) }.map_err(err)?;
                    imported.push(id);
                    ids.push(id);
                } else {
                    ids.push(BufferId::try_from(a).map_err(|_| err(format!("buffer id {a}")))?);
                }
            }
            // SAFETY: PyTorch's current stream of this device, which
            // outlives the launches it queues (or 0).
            unsafe { self.dev.use_stream(stream) }.map_err(err)?;
            for (kernel, slots) in &plan.kernels {
                let args = slots
                    .iter()
                    .map(|s| {
                        Ok(match *s {
                            Slot::Buffer(i, dtype) => Arg::Buffer {
                                id: ids[i],
                                dtype: dtype.to_string(),
                                len: buffers[i].3,
                                offset: 0,
                            },
                            Slot::Size(i) => Arg::Size(i32::try_from(sizes[i]).map_err(|_| {
                                err(format!("size {} does not fit in an i32", sizes[i]))
                            })?),
                            Slot::Scalar(i, dtype) => Arg::Scalar {
                                dtype: dtype.to_string(),
                                bytes: scalars[i].clone(),
                            },
                        })
                    })
                    .collect::<PyResult<Vec<Arg>>>()?;
                self.dev.launch(module, kernel, &args).map_err(err)?;
            }
            Ok(())
        })();
        for id in imported {
            let _ = self.dev.free(id);
        }
        result
    }
}

/// One kernel argument of a [`Plan`]: which of a call's buffers, sizes or
/// scalars it is, with its dtype.
enum Slot {
    Buffer(usize, &'static str),
    Size(usize),
    Scalar(usize, &'static str),
}

/// A module's launches worked out once, from its launch document: for each
/// kernel, in order, where each argument comes from in a call. A call from
/// Python then crosses into Rust once.
#[pyclass(frozen)]
struct Plan {
    kernels: Vec<(String, Vec<Slot>)>,
    /// How many buffers, sizes and scalars a call passes.
    counts: [usize; 3],
}

fn plan_of(
    doc: &str,
    buffers: &[String],
    sizes: &[String],
    scalars: &[String],
) -> Result<Plan, String> {
    let doc =
        rocmc_device::launch::LaunchInfo::from_json(doc.as_bytes()).map_err(|e| e.to_string())?;
    let at = |names: &[String], n: &str| {
        names
            .iter()
            .position(|x| x == n)
            .ok_or_else(|| format!("argument `{n}` is not in the call's signature"))
    };
    let dtype = |d: &str| {
        rocmc_device::launch::dtype(d)
            .map(|(n, _)| n)
            .ok_or_else(|| format!("unknown dtype `{d}`"))
    };
    let kernels = doc
        .kernels
        .iter()
        .map(|k| {
            let slots = k
                .args
                .iter()
                .map(|a| {
                    use rocmc_device::launch::ArgRole;
                    Ok(match a.role {
                        ArgRole::Buffer => Slot::Buffer(at(buffers, &a.name)?, dtype(&a.dtype)?),
                        ArgRole::Size => Slot::Size(at(sizes, &a.name)?),
                        ArgRole::Scalar => Slot::Scalar(at(scalars, &a.name)?, dtype(&a.dtype)?),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok((k.name.clone(), slots))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Plan {
        kernels,
        counts: [buffers.len(), sizes.len(), scalars.len()],
    })
}

#[pymodule]
fn _rocmc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RocmcError", m.py().get_type::<RocmcError>())?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    #[cfg(feature = "compiler")]
    {
        m.add_function(wrap_pyfunction!(compile, m)?)?;
        m.add_function(wrap_pyfunction!(cli, m)?)?;
    }
    m.add_class::<Device>()?;
    m.add_class::<Plan>()?;
    Ok(())
}
