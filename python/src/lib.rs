//! `rocmc._rocmc`: the Rust half of the Python package (the Python half,
//! `rocmc/`, marshals arrays and arguments). Devices come from
//! `rocmc-runtime`; each launch is checked against the module's launch
//! document by the device, as for every other caller.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
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

    /// Launches `kernel` of `module` with `args`: tuples `("buffer", id,
    /// dtype, elements)`, `("size", n)` or `("scalar", dtype, bytes)`.
    fn launch(
        &mut self,
        module: &str,
        kernel: &str,
        args: Vec<Bound<'_, PyTuple>>,
    ) -> PyResult<()> {
        let args = args.iter().map(wire_arg).collect::<PyResult<Vec<Arg>>>()?;
        self.dev.launch(module, kernel, &args).map_err(err)
    }

    fn synchronize(&mut self) -> PyResult<()> {
        self.dev.synchronize().map_err(err)
    }

    /// Memory of this device that a framework owns (a PyTorch tensor's
    /// `data_ptr()` and size in bytes) as a buffer id, used in place;
    /// `free` forgets it. Only rocmc/_launch.py calls this, with a tensor
    /// it keeps referenced until the launches are queued and the id freed.
    fn _import_memory(&mut self, address: u64, bytes: u64) -> PyResult<BufferId> {
        // SAFETY: the one caller passes a live tensor of this device
        // (checked against its device index), referenced for the id's use.
        unsafe { self.dev.import(address, bytes) }.map_err(err)
    }

    /// Queues later launches on the framework's stream `stream` (PyTorch's
    /// `current_stream().cuda_stream`; 0: the default stream).
    fn _use_stream(&mut self, stream: u64) -> PyResult<()> {
        // SAFETY: the one caller passes PyTorch's current stream of this
        // device, which outlives the launches it queues.
        unsafe { self.dev.use_stream(stream) }.map_err(err)
    }
}

fn wire_arg(t: &Bound<'_, PyTuple>) -> PyResult<Arg> {
    let kind: String = t.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "buffer" => Arg::Buffer {
            id: t.get_item(1)?.extract()?,
            dtype: t.get_item(2)?.extract()?,
            len: t.get_item(3)?.extract()?,
            offset: 0,
        },
        "size" => {
            let n: i64 = t.get_item(1)?.extract()?;
            Arg::Size(
                i32::try_from(n).map_err(|_| err(format!("size {n} does not fit in an i32")))?,
            )
        }
        "scalar" => Arg::Scalar {
            dtype: t.get_item(1)?.extract()?,
            bytes: t.get_item(2)?.extract()?,
        },
        other => return Err(err(format!("unknown argument kind {other:?}"))),
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
    Ok(())
}
