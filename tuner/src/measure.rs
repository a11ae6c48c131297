//! Checking and timing compiled candidates on one device or several.
//!
//! Each device gets its own three input sets (uploaded once) and runs
//! candidates one at a time: once at the check sizes against the reference
//! result, then timed at the requested sizes. With several devices each
//! runs in its own thread (a device handle need not be `Send`: the thread
//! opens its own), and a device is handed its next candidate as soon as it
//! reports the last, so a slow device never holds up a fast one.

use crate::{Compiled, Outcome};
use rocmc_ir::interp::Buffer;
use rocmc_ir::reference::{compare, random_inputs, Inputs};
use rocmc_ir::Kernel;
use rocmc_remote::proto::{DeviceInfo, WireArg};
use rocmc_remote::Device;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// Everything a device needs to check and time candidates of one kernel.
pub struct Bench {
    /// The kernel (its computation; schedules differ per candidate).
    pub kernel: Kernel,
    /// Sizes to time at.
    pub sizes: Vec<i64>,
    /// Sizes the results are checked at.
    pub check_sizes: Vec<i64>,
    check_inputs: Inputs,
    want: Vec<Buffer>,
    seed: u64,
    /// Timed launches per kernel.
    pub reps: u32,
    /// No candidate is started after this.
    pub deadline: Option<Instant>,
}

impl Bench {
    /// Computes the reference result at the check sizes once: the
    /// computation is the same for every candidate, only the schedule differs.
    pub fn new(
        kernel: Kernel,
        sizes: Vec<i64>,
        seed: u64,
        reps: u32,
        deadline: Option<Instant>,
    ) -> Result<Bench, String> {
        let check_sizes = crate::check_sizes(&kernel, &sizes);
        let check_inputs = random_inputs(&kernel, &check_sizes, &HashMap::new(), seed)?;
        let want = rocmc_ir::interp::run(
            &kernel,
            &check_sizes,
            &check_inputs.pvals,
            &check_inputs.inputs,
        )
        .map_err(|e| format!("the reference interpreter refused the check sizes: {e}"))?;
        Ok(Bench {
            kernel,
            sizes,
            check_sizes,
            check_inputs,
            want,
            seed,
            reps,
            deadline,
        })
    }
}

/// Buffers of one input set on a device.
struct Set {
    ids: Vec<u32>,
    inputs: Inputs,
}

fn upload(dev: &mut dyn Device, inputs: Inputs) -> Result<Set, String> {
    let mut ids = Vec::new();
    for b in &inputs.host {
        let id = dev.alloc(b.len() as u64).map_err(|e| e.to_string())?;
        dev.write(id, 0, b).map_err(|e| e.to_string())?;
        ids.push(id);
    }
    Ok(Set { ids, inputs })
}

fn free(dev: &mut dyn Device, set: &Set) {
    for &id in &set.ids {
        let _ = dev.free(id);
    }
}

/// One device ready to measure: its handle and its timing inputs.
pub struct Station<'d> {
    dev: &'d mut dyn Device,
    sets: Vec<Set>,
}

impl<'d> Station<'d> {
    /// Uploads three sets of random inputs at the timing sizes.
    pub fn new(dev: &'d mut dyn Device, bench: &Bench) -> Result<Station<'d>, String> {
        let mut sets = Vec::new();
        for i in 0..3 {
            let inputs = random_inputs(
                &bench.kernel,
                &bench.sizes,
                &HashMap::new(),
                bench.seed + 1 + i,
            )?;
            sets.push(upload(dev, inputs)?);
        }
        dev.synchronize().map_err(|e| e.to_string())?;
        Ok(Station { dev, sets })
    }

    /// The device.
    pub fn info(&self) -> &DeviceInfo {
        self.dev.info()
    }

    /// Checks, then times, one candidate.
    pub fn run(&mut self, bench: &Bench, c: &Compiled) -> Outcome {
        if bench.deadline.is_some_and(|d| Instant::now() > d) {
            return Outcome::Skipped;
        }
        let out = match self.dev.load_module(&c.module) {
            Err(e) => Outcome::Failed(e.to_string()),
            Ok(hash) => match self.check(bench, c, &hash) {
                Err(e) => Outcome::Failed(e),
                Ok(Err(why)) => Outcome::Wrong(why),
                Ok(Ok(())) => match self.time(bench, c, &hash) {
                    Ok(ms) => Outcome::Timed(ms),
                    Err(e) => Outcome::Failed(e),
                },
            },
        };
        if let Outcome::Failed(_) = out {
            // A failure may leave the session unusable; find out now, not in the next candidate.
            let _ = self.dev.synchronize();
        }
        out
    }

    /// Times one candidate again (finalists, on one device).
    pub fn retime(&mut self, bench: &Bench, c: &Compiled) -> Result<f64, String> {
        let hash = self.dev.load_module(&c.module).map_err(|e| e.to_string())?;
        self.time(bench, c, &hash)
    }

    fn args(
        bench: &Bench,
        kl: &rocmc_device::launch::KernelLaunch,
        set: &Set,
        sizes: &[i64],
    ) -> Result<Vec<WireArg>, String> {
        rocmc_remote::device::wire_args(
            &bench.kernel,
            kl,
            &set.ids,
            &rocmc_remote::device::element_counts(&bench.kernel, &set.inputs.host),
            sizes,
            &set.inputs.pbytes,
        )
    }

    /// Runs at the check sizes and compares with the reference.
    fn check(
        &mut self,
        bench: &Bench,
        c: &Compiled,
        hash: &str,
    ) -> Result<Result<(), String>, String> {
        let set = upload(self.dev, bench.check_inputs.clone())?;
        let dev = &mut *self.dev;
        let r = (|| {
            for kl in &c.launch.kernels {
                let args = Self::args(bench, kl, &set, &bench.check_sizes)?;
                dev.launch(hash, &kl.name, &args)
                    .map_err(|e| e.to_string())?;
            }
            let got = compare(&bench.kernel, &bench.want, |i| {
                dev.read_all(set.ids[i]).map_err(|e| e.to_string())
            })?;
            Ok(match got.iter().find(|c| !c.ok()) {
                None => Ok(()),
                Some(bad) => Err(format!(
                    "{} differs from the interpreter by {:.3e} (tolerance {:.0e})",
                    bad.tensor, bad.max_error, bad.tolerance
                )),
            })
        })();
        free(self.dev, &set);
        r
    }

    /// Median milliseconds of one run of all the program's kernels: warm-up,
    /// then `reps` launches spread over the three input sets in turn.
    fn time(&mut self, bench: &Bench, c: &Compiled, hash: &str) -> Result<f64, String> {
        let per_set = bench.reps.div_ceil(self.sets.len() as u32).max(1);
        let mut total = 0.0;
        for kl in &c.launch.kernels {
            let mut samples = Vec::new();
            for (i, set) in self.sets.iter().enumerate() {
                let args = Self::args(bench, kl, set, &bench.sizes)?;
                let warmup = if i == 0 { 3 } else { 1 };
                samples.extend(
                    self.dev
                        .time(hash, &kl.name, &args, warmup, per_set)
                        .map_err(|e| e.to_string())?,
                );
            }
            samples.sort_by(f64::total_cmp);
            total += samples[samples.len() / 2];
        }
        Ok(total)
    }
}

impl Drop for Station<'_> {
    fn drop(&mut self) {
        for s in &self.sets {
            free(self.dev, s);
        }
        let _ = self.dev.synchronize();
    }
}

/// What a device thread is asked to do.
pub(crate) enum Job {
    Run(usize, Arc<Compiled>),
    Retime(usize, Arc<Compiled>),
}

/// What it answers.
pub(crate) enum Done {
    Ran(usize, Outcome),
    Retimed(usize, Result<f64, String>),
}

/// Where candidates are measured.
pub enum Devices<'a> {
    /// One open device, used on the calling thread.
    One(&'a mut dyn Device),
    /// Devices by name (`cuda:0`, `remote://…`), each opened and used in its own thread.
    Named(Vec<String>),
}

/// Devices ready to measure, for the length of a search.
pub(crate) enum Pool<'d> {
    Inline(Station<'d>),
    Threads {
        infos: Vec<DeviceInfo>,
        jobs: Vec<mpsc::Sender<Job>>,
        done: mpsc::Receiver<(usize, Done)>,
    },
}

impl Pool<'_> {
    /// The devices.
    pub(crate) fn infos(&self) -> Vec<DeviceInfo> {
        match self {
            Pool::Inline(s) => vec![s.info().clone()],
            Pool::Threads { infos, .. } => infos.clone(),
        }
    }

    /// Runs `batch`, reporting each outcome as it arrives.
    pub(crate) fn run(
        &mut self,
        bench: &Bench,
        batch: Vec<(usize, Arc<Compiled>)>,
        on: &mut dyn FnMut(usize, Outcome),
    ) {
        match self {
            Pool::Inline(st) => {
                for (i, c) in batch {
                    let o = st.run(bench, &c);
                    on(i, o);
                }
            }
            Pool::Threads { jobs, done, .. } => {
                let mut queue = batch.into_iter();
                let mut busy = 0;
                // One candidate per device at a time; the next goes to whichever answers first.
                for tx in jobs.iter() {
                    if let Some((i, c)) = queue.next() {
                        if tx.send(Job::Run(i, c)).is_ok() {
                            busy += 1;
                        }
                    }
                }
                while busy > 0 {
                    let Ok((from, Done::Ran(i, o))) = done.recv() else {
                        break;
                    };
                    busy -= 1;
                    on(i, o);
                    if let Some((i, c)) = queue.next() {
                        if jobs[from].send(Job::Run(i, c)).is_ok() {
                            busy += 1;
                        }
                    }
                }
                for (i, _) in queue {
                    on(i, Outcome::Failed("every device stopped answering".into()));
                }
            }
        }
    }

    /// Re-times `batch` on the first device, so the finalists' times are
    /// comparable (several devices of one kind still differ a little).
    pub(crate) fn retime(
        &mut self,
        bench: &Bench,
        batch: Vec<(usize, Arc<Compiled>)>,
    ) -> Vec<(usize, Result<f64, String>)> {
        match self {
            Pool::Inline(st) => batch
                .into_iter()
                .map(|(i, c)| (i, st.retime(bench, &c)))
                .collect(),
            Pool::Threads { jobs, done, .. } => {
                let n = batch.len();
                for (i, c) in batch {
                    let _ = jobs[0].send(Job::Retime(i, c));
                }
                let mut out = Vec::new();
                while out.len() < n {
                    match done.recv() {
                        Ok((_, Done::Retimed(i, r))) => out.push((i, r)),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                out
            }
        }
    }
}

/// Opens the devices and runs `body` with them ready.
pub(crate) fn with_pool<R>(
    devices: Devices,
    bench: &Bench,
    body: impl FnOnce(&mut Pool) -> Result<R, String>,
) -> Result<R, String> {
    match devices {
        Devices::One(dev) => {
            let mut pool = Pool::Inline(Station::new(dev, bench)?);
            body(&mut pool)
        }
        Devices::Named(names) => std::thread::scope(|s| {
            let (done_tx, done_rx) = mpsc::channel();
            let (ready_tx, ready_rx) = mpsc::channel();
            let mut jobs = Vec::new();
            for (t, name) in names.iter().enumerate() {
                let (job_tx, job_rx) = mpsc::channel::<Job>();
                jobs.push(job_tx);
                let (done_tx, ready_tx) = (done_tx.clone(), ready_tx.clone());
                s.spawn(move || {
                    let mut dev = match rocmc_runtime::open(name) {
                        Ok(d) => d,
                        Err(e) => {
                            let _ = ready_tx.send((t, Err(format!("{name}: {e}"))));
                            return;
                        }
                    };
                    let mut st = match Station::new(dev.as_mut(), bench) {
                        Ok(st) => st,
                        Err(e) => {
                            let _ = ready_tx.send((t, Err(format!("{name}: {e}"))));
                            return;
                        }
                    };
                    // Named as the caller named it (a worker calls its own device `cpu`).
                    let info = DeviceInfo {
                        name: name.clone(),
                        ..st.info().clone()
                    };
                    let _ = ready_tx.send((t, Ok(info)));
                    for job in job_rx {
                        // A panic must still answer the job, or the search would wait for it forever.
                        let caught = |e: Box<dyn std::any::Any + Send>| {
                            let why = e
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            format!("measuring panicked (a rocmc bug): {why}")
                        };
                        let d = match job {
                            Job::Run(i, c) => Done::Ran(
                                i,
                                catch_unwind(AssertUnwindSafe(|| st.run(bench, &c)))
                                    .unwrap_or_else(|e| Outcome::Failed(caught(e))),
                            ),
                            Job::Retime(i, c) => Done::Retimed(
                                i,
                                catch_unwind(AssertUnwindSafe(|| st.retime(bench, &c)))
                                    .unwrap_or_else(|e| Err(caught(e))),
                            ),
                        };
                        if done_tx.send((t, d)).is_err() {
                            break;
                        }
                    }
                });
            }
            // Only the threads hold senders now: if they all end, receiving fails instead of waiting.
            drop(ready_tx);
            drop(done_tx);
            let mut infos: Vec<Option<DeviceInfo>> = vec![None; names.len()];
            let mut first_err = None;
            // Each thread reports once, then keeps its sender while it serves jobs.
            for (t, r) in ready_rx.iter().take(names.len()) {
                match r {
                    Ok(info) => infos[t] = Some(info),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_err {
                return Err(e);
            }
            let infos: Vec<DeviceInfo> = infos.into_iter().flatten().collect();
            if let Some(other) = infos.iter().find(|i| i.target != infos[0].target) {
                return Err(format!(
                    "the devices differ: {} is {} and {} is {}; tune on devices of one target at a time",
                    infos[0].name, infos[0].target, other.name, other.target
                ));
            }
            let mut pool = Pool::Threads {
                infos,
                jobs,
                done: done_rx,
            };
            // Dropping the pool closes the job channels, which ends the threads.
            body(&mut pool)
        }),
    }
}
