//! An f32 inference store's weights kept in column strips ("panels"), for whole-sequence
//! forwards where gemm runs its AVX-512 or AVX2 kernels.
//!
//! An inference store's weight never changes, so it is laid out, for its whole life, the way
//! gemm's microkernel reads it (`kernels::strips`: why, the widths, the measurements): a
//! (O/w, I, w) buffer, strip p holding columns w·p … w·p + w − 1 of W (I, O) row-major. The
//! values are placed as they are drawn or read from a checkpoint ([`index`]).
//!
//! The tensor a model holds is a view of the buffer with the weight's logical dims: an
//! `nn.Linear` weight (O, I) as (O/w, w, I), strides (w·I, 1, w); a `Conv1D` weight (I, O)
//! as (I, O/w, w), strides (w, w·I, 1). `kernels::linear` recognises both by their strides.
//! Shape vocabulary: I in features, O out features, w the strip width, P = O / w.

use super::strips::WIDTHS;
use candle_core::{Layout, Result, Tensor};

/// Whether a weight with `o` output features can be cut into whole strips of `width`.
pub fn fits(o: usize, width: usize) -> bool {
    o > 0 && o.is_multiple_of(width)
}

/// Position of W[i][o] (the weight as (I, O)) in the (O/w, I, w) buffer of `i_len` inputs
/// and strips `w` wide.
pub fn index(i: usize, o: usize, i_len: usize, w: usize) -> usize {
    (o / w) * i_len * w + i * w + o % w
}

/// The weight view of a contiguous (O/w, I, w) buffer: (O, I) as (O/w, w, I) for
/// `nn.Linear` (`out_in`), else (I, O) as (I, O/w, w) for `Conv1D`.
pub fn view(buffer: Tensor, out_in: bool) -> Result<Tensor> {
    if out_in {
        buffer.transpose(1, 2) // (P, w, I)
    } else {
        buffer.transpose(0, 1) // (I, P, w)
    }
}

/// A weight held in strips: its (I, O) and the strip width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strips {
    pub i: usize,
    pub o: usize,
    pub width: usize,
}

/// The strips `l` holds when it is a [`view`] of a strip buffer for this weight layout.
pub fn recognise(l: &Layout, out_in: bool) -> Option<Strips> {
    let (i, p, w) = match (l.dims(), l.stride()) {
        (&[p, w, i], &[sp, 1, si]) if out_in && si == w && sp == w * i => (i, p, w),
        (&[i, p, w], &[si, sp, 1]) if !out_in && si == w && sp == w * i => (i, p, w),
        _ => return None,
    };
    WIDTHS.contains(&w).then_some(Strips {
        i,
        o: p * w,
        width: w,
    })
}

/// The (O/w, I, w) strip buffer of a weight given as (I, O) row-major values, placed by
/// [`index`] (the store places its values the same way as it draws or reads them).
#[cfg(test)]
pub fn panelled(w_io: &[f32], i_len: usize, o_len: usize, w: usize) -> Tensor {
    let mut buf = vec![0f32; w_io.len()];
    for i in 0..i_len {
        for o in 0..o_len {
            buf[index(i, o, i_len, w)] = w_io[i * o_len + o];
        }
    }
    Tensor::from_vec(buf, (o_len / w, i_len, w), &candle_core::Device::Cpu).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn views_hold_the_weight_and_are_recognised_only_for_their_layout() {
        let (i, o) = (5, 128);
        let w: Vec<f32> = (0..i * o).map(|v| v as f32).collect(); // (I, O)
        let w_io = Tensor::from_vec(w.clone(), (i, o), &Device::Cpu).unwrap();
        for width in WIDTHS {
            let buf = panelled(&w, i, o, width);
            let lin = view(buf.clone(), true).unwrap();
            let conv = view(buf, false).unwrap();
            let as_oi = lin.contiguous().unwrap().reshape((o, i)).unwrap();
            assert_eq!(
                as_oi.to_vec2::<f32>().unwrap(),
                w_io.t().unwrap().to_vec2::<f32>().unwrap()
            );
            let as_io = conv.contiguous().unwrap().reshape((i, o)).unwrap();
            assert_eq!(
                as_io.to_vec2::<f32>().unwrap(),
                w_io.to_vec2::<f32>().unwrap()
            );
            let strips = Some(Strips { i, o, width });
            assert_eq!(recognise(lin.layout(), true), strips);
            assert_eq!(recognise(conv.layout(), false), strips);
            assert_eq!(recognise(lin.layout(), false), None);
            assert_eq!(recognise(conv.layout(), true), None);
        }
        assert_eq!(recognise(w_io.layout(), false), None);
        // The same stride pattern with a width gemm has no kernel for is not a strip buffer.
        let odd = Tensor::zeros((4, i, 32), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert_eq!(recognise(view(odd, true).unwrap().layout(), true), None);
    }

    #[test]
    fn only_whole_strips_fit() {
        assert!(fits(64, 64) && fits(32000, 64) && !fits(0, 64) && !fits(50257, 64));
        assert!(!fits(32, 64) && fits(16, 16) && fits(5632, 16) && !fits(50257, 16));
    }
}
