//! What a remote device shares with the local ones: its errors as the
//! device interface's, and a launch's arguments on the wire. Opening a
//! device by name (`remote://…` or this machine's) is `rocmc-runtime`'s
//! job; the worker gives its sessions that opener ([`crate::session::SessionConfig::open`]).

use crate::client::RemoteError;
use crate::proto::WireArg;
use rocmc_device::launch::{ArgRole, KernelLaunch};
use rocmc_device::Error;

impl From<RemoteError> for Error {
    fn from(e: RemoteError) -> Error {
        match e {
            RemoteError::Address(m) | RemoteError::Local(m) => Error::NoDevice(m),
            RemoteError::BadLaunch { kernel, reason } => Error::BadLaunch { kernel, reason },
            RemoteError::Worker { addr, message } => Error::Runtime {
                device: format!("worker {addr}"),
                message,
            },
            other => Error::Transport(Box::new(other)),
        }
    }
}

/// The elements of each tensor's bytes in `host` (one byte vector per
/// tensor of `k`): the lengths [`wire_args`] takes.
pub fn element_counts(k: &rocmc_ir::Kernel, host: &[Vec<u8>]) -> Vec<u64> {
    k.tensors
        .iter()
        .zip(host)
        .map(|(t, b)| (b.len() / t.dtype.size()) as u64)
        .collect()
}

/// A kernel's arguments on the wire: each argument of the launch document
/// matched by name to the kernel's tensors (buffer `ids[i]` of `lens[i]`
/// elements), sizes and parameters (8-byte slots of `pbytes`).
pub fn wire_args(
    k: &rocmc_ir::Kernel,
    kl: &KernelLaunch,
    ids: &[u32],
    lens: &[u64],
    sizes: &[i64],
    pbytes: &[u8],
) -> std::result::Result<Vec<WireArg>, String> {
    let find = |what: &str, i: Option<usize>, name: &str| {
        i.ok_or_else(|| format!("the launch document names {what} `{name}` the kernel lacks"))
    };
    kl.args
        .iter()
        .map(|a| {
            Ok(match a.role {
                ArgRole::Buffer => {
                    let i = find(
                        "tensor",
                        k.tensors.iter().position(|t| t.name == a.name),
                        &a.name,
                    )?;
                    let t = &k.tensors[i];
                    WireArg::Buffer {
                        id: ids[i],
                        dtype: t.dtype.name().into(),
                        len: lens[i],
                        offset: 0,
                    }
                }
                ArgRole::Size => {
                    let i = find(
                        "size",
                        k.sizes.iter().position(|s| s.name == a.name),
                        &a.name,
                    )?;
                    WireArg::Size(sizes[i] as i32)
                }
                ArgRole::Scalar => {
                    let i = find(
                        "parameter",
                        k.params.iter().position(|p| p.name == a.name),
                        &a.name,
                    )?;
                    let t = k.params[i].dtype;
                    WireArg::Scalar {
                        dtype: t.name().into(),
                        bytes: pbytes[i * 8..i * 8 + t.size()].to_vec(),
                    }
                }
            })
        })
        .collect()
}
