//! GPU memory through NVML, with the driver library loaded at run time (`dlopen` of
//! `libnvidia-ml.so.1`): the binary has no link-time dependency on NVIDIA software. No library, no
//! device, a failing call or implausible values → `unavailable` and why (docs/reliability.md case 20),
//! never an error.

use crate::record::watch::{GpuSample, GpuStatus};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

impl GpuStatus {
    /// `unavailable (why)` or `available (N devices)` for the terminal.
    pub fn describe(&self) -> String {
        match self {
            GpuStatus::Available { devices } => {
                format!("available ({devices} NVIDIA device(s) via NVML)")
            }
            GpuStatus::Unavailable { reason } => format!("unavailable ({reason})"),
        }
    }
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type Device = *mut c_void;

/// NVML, opened once.
pub struct Nvml {
    count: u32,
    memory: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    handle: unsafe extern "C" fn(c_uint, *mut Device) -> c_int,
    processes: Option<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int>,
}

// The function pointers are plain C entry points, callable from any thread.
unsafe impl Send for Nvml {}

impl Nvml {
    /// Opens NVML, or says why it cannot.
    pub fn open() -> Result<Nvml, String> {
        let lib = unsafe {
            let l = libc::dlopen(
                c"libnvidia-ml.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if l.is_null() {
                let err = libc::dlerror();
                let why = if err.is_null() {
                    "not found".to_string()
                } else {
                    CStr::from_ptr(err).to_string_lossy().into_owned()
                };
                return Err(format!(
                    "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded: {why}"
                ));
            }
            l
        };
        let sym = |name: &CStr| unsafe { libc::dlsym(lib, name.as_ptr()) };
        let need = |name: &CStr| {
            let p = sym(name);
            if p.is_null() {
                Err(format!("NVML too old: no {}", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        unsafe {
            let init: unsafe extern "C" fn() -> c_int = std::mem::transmute(need(c"nvmlInit_v2")?);
            let count: unsafe extern "C" fn(*mut c_uint) -> c_int =
                std::mem::transmute(need(c"nvmlDeviceGetCount_v2")?);
            let err_string: Option<unsafe extern "C" fn(c_int) -> *const c_char> = {
                let p = sym(c"nvmlErrorString");
                (!p.is_null()).then(|| std::mem::transmute(p))
            };
            let why = |rc: c_int| match err_string {
                Some(f) => CStr::from_ptr(f(rc)).to_string_lossy().into_owned(),
                None => format!("error {rc}"),
            };
            let rc = init();
            if rc != 0 {
                return Err(format!("NVML could not start: {}", why(rc)));
            }
            let mut n: c_uint = 0;
            let rc = count(&mut n);
            if rc != 0 || n == 0 {
                return Err(if rc != 0 {
                    format!("NVML lists no device: {}", why(rc))
                } else {
                    "NVML lists no device".to_string()
                });
            }
            let processes = {
                let p = sym(c"nvmlDeviceGetComputeRunningProcesses_v3");
                (!p.is_null()).then(|| std::mem::transmute(p))
            };
            Ok(Nvml {
                count: n,
                memory: std::mem::transmute(need(c"nvmlDeviceGetMemoryInfo")?),
                handle: std::mem::transmute(need(c"nvmlDeviceGetHandleByIndex_v2")?),
                processes,
            })
        }
    }

    pub fn devices(&self) -> u32 {
        self.count
    }

    /// Device memory summed over devices, and the memory of `pids` where NVML lists them. NVML in a
    /// container may list PIDs of another namespace: then no watched pid matches and the per-process
    /// figure is None (the device figure is still reported, labelled as the device's).
    pub fn sample(&self, pids: &[u32]) -> Option<GpuSample> {
        let mut s = GpuSample::default();
        let mut per_process: Option<u64> = None;
        for i in 0..self.count {
            let mut dev: Device = std::ptr::null_mut();
            unsafe {
                if (self.handle)(i, &mut dev) != 0 {
                    return None;
                }
                let mut m = Memory::default();
                if (self.memory)(dev, &mut m) != 0 || m.used > m.total {
                    return None;
                }
                s.device_used_bytes += m.used;
                s.device_total_bytes += m.total;
                if let Some(f) = self.processes {
                    let mut infos = [ProcessInfo::default(); 256];
                    let mut n: c_uint = infos.len() as c_uint;
                    if f(dev, &mut n, infos.as_mut_ptr()) == 0 {
                        for p in &infos[..(n as usize).min(infos.len())] {
                            // u64::MAX is NVML's "not available"; more than the device is garbage.
                            if pids.contains(&p.pid) && p.used_gpu_memory <= m.total {
                                *per_process.get_or_insert(0) += p.used_gpu_memory;
                            }
                        }
                    }
                }
            }
        }
        s.process_bytes = per_process;
        Some(s)
    }
}

/// Opens NVML and reports the status (the handle when available).
pub fn probe() -> (GpuStatus, Option<Nvml>) {
    match Nvml::open() {
        Ok(n) => (
            GpuStatus::Available {
                devices: n.devices(),
            },
            Some(n),
        ),
        Err(reason) => (GpuStatus::Unavailable { reason }, None),
    }
}
