//! Intel AMX's tile unit (Sapphire Rapids and later Xeons): eight 16-row × 64-byte tile
//! registers and `tdpbf16ps`, one instruction multiplying a 16 × 32 bf16 tile by a 32 × 16 one
//! into a 16 × 16 f32 tile (16,384 FLOP).
//!
//! Reached from stable Rust with `asm!` (the AMX intrinsics and their feature detection are
//! not stable): the CPU is asked through CPUID (leaf 7: AMX-BF16 in EDX bit 22, AMX-TILE in
//! bit 24), and Linux must be asked once per process for the tile data state
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`) before any tile instruction runs,
//! or the first one faults. Each thread configures its own tiles ([`Hardware::start`]) and
//! releases them when done.
//!
//! [`Model`] is the same unit in software (the instructions' definitions in Intel's manual):
//! the product kernel is generic over [`Tiles`], so its packing, blocking and tile order are
//! tested against it on every machine, and the hardware path is tested on machines with AMX.

use std::sync::OnceLock;

/// Rows of a tile.
pub const ROWS: usize = 16;
/// u32 (bf16 pairs, or f32) per tile row: 64 bytes.
pub const COLS: usize = 16;

/// Whether this CPU has AMX-BF16 and AMX-TILE and this build may use them (the `avx512`
/// cargo feature: the build without it stands for an AVX2-only CPU).
pub fn cpu_has_it() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // Leaf 7 is read only where it exists.
        if __cpuid(0).eax < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        cfg!(feature = "avx512") && edx >> 22 & 1 == 1 && edx >> 24 & 1 == 1
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Linux's answer to the request for the tile data state, asked once per process: `Ok` or
/// why not.
fn permission() -> &'static Result<(), String> {
    static ASKED: OnceLock<Result<(), String>> = OnceLock::new();
    ASKED.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: a plain system call with two integer arguments.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_arch_prctl,
                    ARCH_REQ_XCOMP_PERM,
                    XFEATURE_XTILEDATA,
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().to_string())
            }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            Err("tile permission is asked only on x86-64 Linux".into())
        }
    })
}

/// Whether bf16 products run on the tile unit: the CPU has it, `MEMSCOPE_AMX` is not `0`, and
/// Linux granted the tile state (checked once per process).
pub fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        cpu_has_it() && std::env::var("MEMSCOPE_AMX").as_deref() != Ok("0") && permission().is_ok()
    })
}

/// What the Record and `memscope peaks` say about AMX: `None` where the CPU has none, else
/// `amx_bf16`, or why it is not used.
pub fn status() -> Option<String> {
    if !cpu_has_it() {
        return None;
    }
    Some(if std::env::var("MEMSCOPE_AMX").as_deref() == Ok("0") {
        "amx_bf16 off (MEMSCOPE_AMX=0)".into()
    } else if let Err(e) = permission() {
        format!("amx_bf16 unused (Linux refused the tile state: {e})")
    } else {
        "amx_bf16".into()
    })
}

/// The tile operations the AMX product uses, every tile configured as [`ROWS`] × 64 bytes.
/// Tile numbers are constants (the instructions encode them).
pub trait Tiles {
    /// Tile T = 0.
    ///
    /// # Safety
    /// The unit must be configured (every implementation is, from creation to drop).
    unsafe fn zero<const T: u8>(&mut self);
    /// Tile T = the [`ROWS`] rows of 64 bytes at `src`, `stride` bytes apart.
    ///
    /// # Safety
    /// `src` must be valid for those reads.
    unsafe fn load<const T: u8>(&mut self, src: *const u32, stride: usize);
    /// Tile C (16 × 16 f32) += tile A (16 rows × 16 bf16 pairs) · tile B (16 pairs × 16
    /// columns, each a pair of rows 2k and 2k + 1).
    ///
    /// # Safety
    /// As [`Tiles::zero`].
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self);
    /// The [`ROWS`] rows of tile T written at `dst` as f32, `stride` bytes apart.
    ///
    /// # Safety
    /// `dst` must be valid for those writes.
    unsafe fn store<const T: u8>(&mut self, dst: *mut f32, stride: usize);
}

/// The CPU's tile unit, configured on this thread until dropped. Neither `Send` nor `Sync`: the
/// configuration is the thread's, and another thread's tile instructions would fault.
pub struct Hardware(std::marker::PhantomData<*const ()>);

/// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    /// Bytes per row of each tile.
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl Hardware {
    /// Configures tiles 0–7 as 16 rows × 64 bytes on this thread.
    ///
    /// # Safety
    /// [`available`] must be true (the CPU has the unit and Linux granted its state).
    pub unsafe fn start() -> Self {
        debug_assert!(available());
        let mut cfg = Config {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        cfg.colsb[..8].fill((COLS * 4) as u16);
        cfg.rows[..8].fill(ROWS as u8);
        #[cfg(target_arch = "x86_64")]
        std::arch::asm!("ldtilecfg [{}]", in(reg) &cfg as *const Config, options(nostack, readonly));
        Hardware(std::marker::PhantomData)
    }
}

impl Drop for Hardware {
    fn drop(&mut self) {
        // SAFETY: this thread's tiles were configured by `start`.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("tilerelease", options(nostack, nomem))
        };
    }
}

#[cfg(target_arch = "x86_64")]
impl Tiles for Hardware {
    #[inline(always)]
    unsafe fn zero<const T: u8>(&mut self) {
        std::arch::asm!("tilezero tmm{t}", t = const T, options(nostack, nomem));
    }
    #[inline(always)]
    unsafe fn load<const T: u8>(&mut self, src: *const u32, stride: usize) {
        std::arch::asm!(
            "tileloadd tmm{t}, [{p} + {s}*1]",
            t = const T, p = in(reg) src, s = in(reg) stride,
            options(nostack, readonly)
        );
    }
    #[inline(always)]
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        std::arch::asm!(
            "tdpbf16ps tmm{c}, tmm{a}, tmm{b}",
            c = const C, a = const A, b = const B,
            options(nostack, nomem)
        );
    }
    #[inline(always)]
    unsafe fn store<const T: u8>(&mut self, dst: *mut f32, stride: usize) {
        std::arch::asm!(
            "tilestored [{p} + {s}*1], tmm{t}",
            t = const T, p = in(reg) dst, s = in(reg) stride,
            options(nostack)
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Tiles for Hardware {
    unsafe fn zero<const T: u8>(&mut self) {
        unreachable!("available() is false off x86-64")
    }
    unsafe fn load<const T: u8>(&mut self, _: *const u32, _: usize) {
        unreachable!("available() is false off x86-64")
    }
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        unreachable!("available() is false off x86-64")
    }
    unsafe fn store<const T: u8>(&mut self, _: *mut f32, _: usize) {
        unreachable!("available() is false off x86-64")
    }
}

/// The tile unit in software, as Intel's manual defines the instructions (each pair's two
/// products added to the f32 sum in order; the hardware rounds the same sums its own way, so
/// results agree within f32 rounding). Eight tiles of 16 × 16 u32.
pub struct Model {
    tiles: Box<[[u32; ROWS * COLS]; 8]>,
}

impl Model {
    pub fn new() -> Self {
        Model {
            tiles: Box::new([[0; ROWS * COLS]; 8]),
        }
    }
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

/// A bf16's bits as f32.
fn widen(bits: u32) -> f32 {
    f32::from_bits(bits << 16)
}

impl Tiles for Model {
    unsafe fn zero<const T: u8>(&mut self) {
        self.tiles[T as usize].fill(0);
    }
    unsafe fn load<const T: u8>(&mut self, src: *const u32, stride: usize) {
        for r in 0..ROWS {
            let row = (src as *const u8).add(r * stride) as *const u32;
            for c in 0..COLS {
                self.tiles[T as usize][r * COLS + c] = row.add(c).read_unaligned();
            }
        }
    }
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        let (a, b) = (self.tiles[A as usize], self.tiles[B as usize]);
        let c = &mut self.tiles[C as usize];
        for m in 0..ROWS {
            for n in 0..COLS {
                let mut sum = f32::from_bits(c[m * COLS + n]);
                for k in 0..COLS {
                    let (x, y) = (a[m * COLS + k], b[k * COLS + n]);
                    sum += widen(x & 0xffff) * widen(y & 0xffff);
                    sum += widen(x >> 16) * widen(y >> 16);
                }
                c[m * COLS + n] = sum.to_bits();
            }
        }
    }
    unsafe fn store<const T: u8>(&mut self, dst: *mut f32, stride: usize) {
        for r in 0..ROWS {
            let row = (dst as *mut u8).add(r * stride) as *mut f32;
            for c in 0..COLS {
                row.add(c)
                    .write_unaligned(f32::from_bits(self.tiles[T as usize][r * COLS + c]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_agrees_with_proc_cpuinfo() {
        // Linux lists amx_tile and amx_bf16 only where it supports their state; CPUID may
        // report them where Linux does not (an old kernel): then the tiles are unused, and
        // `status` says why.
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let listed =
            cfg!(feature = "avx512") && flags.contains(" amx_bf16") && flags.contains(" amx_tile");
        assert!(
            !listed || cpu_has_it(),
            "/proc/cpuinfo lists AMX, CPUID does not"
        );
        match status() {
            None => println!("this CPU has no AMX: the tile unit's hardware path is not run here"),
            Some(s) => println!("AMX: {s}"),
        }
        if listed && std::env::var("MEMSCOPE_AMX").as_deref() != Ok("0") {
            assert!(
                available(),
                "Linux lists AMX but the tiles are unused: {:?}",
                status()
            );
        }
    }

    /// One tile product on `unit`: A (16 × 32 bf16) · B (32 × 16) into C, added to C's start.
    fn one_product<T: Tiles>(unit: &mut T) -> (Vec<f32>, Vec<f64>) {
        let a: Vec<u32> = (0..256u32)
            .map(|i| {
                let v = |j: u32| half::bf16::from_f32(((j * 7 % 19) as f32 - 9.0) / 4.0);
                v(2 * i).to_bits() as u32 | (v(2 * i + 1).to_bits() as u32) << 16
            })
            .collect();
        let b: Vec<u32> = a.iter().map(|x| x.rotate_left(16) ^ 0x8000).collect();
        let start: Vec<f32> = (0..256).map(|i| i as f32 / 8.0).collect();
        let mut c = start.clone();
        // SAFETY: every buffer holds 16 rows of 64 bytes.
        unsafe {
            unit.load::<0>(c.as_ptr() as *const u32, 64);
            unit.load::<4>(a.as_ptr(), 64);
            unit.load::<6>(b.as_ptr(), 64);
            unit.dot::<0, 4, 6>();
            unit.store::<0>(c.as_mut_ptr(), 64);
        }
        let want = (0..256)
            .map(|mn| {
                let (m, n) = (mn / 16, mn % 16);
                start[mn] as f64
                    + (0..16)
                        .map(|k| {
                            let (x, y) = (a[m * 16 + k], b[k * 16 + n]);
                            widen(x & 0xffff) as f64 * widen(y & 0xffff) as f64
                                + widen(x >> 16) as f64 * widen(y >> 16) as f64
                        })
                        .sum::<f64>()
            })
            .collect();
        (c, want)
    }

    #[test]
    fn a_tile_product_is_the_pairs_sum_on_the_model_and_on_the_cpu_where_it_has_amx() {
        let (got, want) = one_product(&mut Model::new());
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-4, "model: {g} vs {w}");
        }
        if !available() {
            println!(
                "no usable AMX ({}): checked on the software model only",
                status().unwrap_or_else(|| "this CPU has none".into())
            );
            return;
        }
        // SAFETY: available() is true.
        let (got, want) = one_product(&mut unsafe { Hardware::start() });
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-4, "AMX: {g} vs {w}");
        }
    }
}
