//! Embedding lookup: rows of a table (V, C) picked by ids (N) → (N, C), with a backward that
//! scatters the rows' gradients into the table's gradient in place.
//!
//! candle's `embedding` (index_select) backward makes a zeroed (V, C) tensor, index-adds into
//! a second one, and candle's store adds that to a third: for GPT-2 small's 50257×768 table,
//! three 147 MiB buffers where the gradient needs one. Here, with a gradient sink open
//! (`kernels::sink`), the rows are added into the table's gradient where it already is (the
//! tied LM head put its part there first); otherwise the gradient is made once.
//! Shape vocabulary: V table rows, C features, N ids.

use super::{elems, sink};
use crate::instrument::op_timer::{op_scope_in, Pass};
use crate::instrument::scope;
use candle_core::{
    bail, CpuStorage, CustomOp2, DType, InplaceOp3, Layout, Result, Shape, Storage, Tensor,
};
use rayon::prelude::*;

/// `table (V, C)` rows at `ids (N)` u32 → (N, C). Differentiable in the table. Half types run
/// candle's `embedding`.
pub fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    let _t = op_scope_in(scope::EMBEDDING_ID, "embedding", Pass::Forward);
    table.dims2()?;
    ids.dims1()?;
    if ids.dtype() != DType::U32 {
        bail!("embedding: ids must be u32, got {:?}", ids.dtype())
    }
    if table.dtype() != DType::F32 || !table.device().is_cpu() {
        return table.embedding(ids);
    }
    table.apply_op2(&ids.contiguous()?, Embedding)
}

struct Embedding;

fn read_ids<'a>(s: &'a CpuStorage, l: &Layout, v: usize) -> Result<&'a [u32]> {
    let (CpuStorage::U32(x), Some((a, b))) = (s, l.contiguous_offsets()) else {
        bail!("embedding: ids must be contiguous u32")
    };
    let ids = &x[a..b];
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= v) {
        bail!("embedding: id {bad} is outside the table (size {v}): check --config's vocab_size")
    }
    Ok(ids)
}

/// grad (V, C) += the rows of dy (N, C) at ids.
fn scatter(grad: &mut [f32], ids: &[u32], dy: &[f32], c: usize) {
    for (&i, row) in ids.iter().zip(dy.chunks(c)) {
        let i = i as usize;
        grad[i * c..(i + 1) * c]
            .iter_mut()
            .zip(row)
            .for_each(|(g, &d)| *g += d);
    }
}

impl CustomOp2 for Embedding {
    fn name(&self) -> &'static str {
        "memscope-embedding"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (v, c) = l1.shape().dims2()?;
        let table = elems::read("embedding", s1, l1)?;
        let ids = read_ids(s2, l2, v)?;
        let mut y = vec![0f32; ids.len() * c]; // (N, C)
        y.par_chunks_mut(c)
            .zip(ids.par_iter())
            .for_each(|(row, &i)| {
                row.copy_from_slice(&table[i as usize * c..(i as usize + 1) * c])
            });
        Ok((CpuStorage::F32(y), Shape::from((ids.len(), c))))
    }

    fn bwd(
        &self,
        table: &Tensor,
        ids: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _t = op_scope_in(scope::EMBEDDING_ID, "embedding", Pass::Backward);
        let dy = dy.contiguous()?;
        let fresh = || -> Result<Tensor> {
            let (v, c) = table.dims2()?;
            let mut g = vec![0f32; v * c]; // (V, C)
            let ((is, il), (ds, dl)) = (ids.storage_and_layout(), dy.storage_and_layout());
            let (Storage::Cpu(is), Storage::Cpu(ds)) = (&*is, &*ds) else {
                bail!("embedding backward: CPU tensors only")
            };
            scatter(
                &mut g,
                read_ids(is, il, v)?,
                &elems::read("embedding backward", ds, dl)?,
                c,
            );
            Tensor::from_vec(g, (v, c), table.device())
        };
        if !sink::takes(table) {
            return Ok((Some(fresh()?), None));
        }
        sink::add(table, fresh, |g| g.inplace_op3(ids, &dy, &ScatterAdd))?;
        Ok((None, None))
    }
}

/// In place: grad (V, C) += rows of dy (N, C) at ids (N).
struct ScatterAdd;

impl InplaceOp3 for ScatterAdd {
    fn name(&self) -> &'static str {
        "memscope-embedding-scatter"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (v, c) = l1.shape().dims2()?;
        let (ids, dy) = (
            read_ids(s2, l2, v)?,
            elems::read("embedding backward", s3, l3)?,
        );
        let (CpuStorage::F32(g), Some((a, b))) = (s1, l1.contiguous_offsets()) else {
            bail!("embedding backward: the gradient must be contiguous f32")
        };
        scatter(&mut g[a..b], ids, &dy, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check::{against_reference, grad_check};
    use candle_core::{Device, Var};

    fn ids() -> Tensor {
        Tensor::new(&[3u32, 0, 3, 6, 1], &Device::Cpu).unwrap()
    }

    #[test]
    fn matches_candle_embedding_with_repeated_ids() {
        let t = Tensor::randn(0f32, 1.0, (7, 5), &Device::Cpu).unwrap();
        against_reference(
            &[t],
            |x| embedding(&x[0], &ids()),
            |x| x[0].embedding(&ids()),
            1e-6,
        );
    }

    #[test]
    fn gradient_matches_finite_differences() {
        grad_check(&[&[7, 3]], |x| embedding(&x[0], &ids()));
    }

    #[test]
    fn with_a_sink_open_the_gradient_goes_there_and_adds_in_place() {
        let t = Var::from_tensor(&Tensor::randn(0f32, 1.0, (7, 5), &Device::Cpu).unwrap()).unwrap();
        let loss = || embedding(t.as_tensor(), &ids()).unwrap().sum_all().unwrap();
        let (store, sunk) = sink::collect(Default::default(), || {
            loss().backward()?;
            loss().backward()
        })
        .unwrap();
        assert!(
            store.get(t.as_tensor()).is_none(),
            "candle's store gets none"
        );
        let g: Vec<Vec<f32>> = sunk[&t.as_tensor().id()].to_vec2().unwrap();
        // Two passes; id 3 appears twice in each.
        assert_eq!(g[3], vec![4.0; 5]);
        assert_eq!(g[0], vec![2.0; 5]);
        assert_eq!(g[2], vec![0.0; 5]);
    }

    #[test]
    fn an_id_outside_the_table_is_an_error_naming_it() {
        let t = Tensor::zeros((4, 2), DType::F32, &Device::Cpu).unwrap();
        let e = embedding(&t, &Tensor::new(&[1u32, 9], &Device::Cpu).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("id 9") && e.contains("size 4"), "{e}");
    }
}
