//! The parameters of a model by checkpoint name: created from a seeded random initialisation or
//! read from safetensors, as trainable `Var`s (train) or detached tensors (inference, so no
//! autograd graph is recorded — docs/design.md: 1953 MiB instead of 699 MiB otherwise).

use crate::kernels::sink::Masters;
use crate::kernels::{panels, strips};
pub use crate::model::purpose::Purpose;
use crate::model::weights::WeightSet;
use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor, Var};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// How a parameter is initialised when no checkpoint is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Normal(f32),
    Ones,
    Zeros,
}

/// One parameter: its checkpoint name, shape and initialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
    /// An `nn.Linear` weight (O, I) that the model reads only as the right operand of x·Wᵀ.
    /// Inference stores keep it transposed or in panels ([`ParamSpec::placement`]).
    pub linear: bool,
    /// Read only through `kernels::linear` (an `nn.Linear` weight, or GPT-2's Conv1D (I, O)
    /// read as x·W): its gradient is made by that kernel alone, which can hand it to the sink.
    pub through_linear: bool,
}

impl ParamSpec {
    pub fn new(name: impl Into<String>, shape: &[usize], init: Init) -> Self {
        Self {
            name: name.into(),
            shape: shape.to_vec(),
            init,
            linear: false,
            through_linear: false,
        }
    }

    /// An `nn.Linear` weight (O, I), read only through `kernels::linear` as x·Wᵀ.
    pub fn linear(name: impl Into<String>, shape: &[usize], init: Init) -> Self {
        Self {
            linear: true,
            through_linear: true,
            ..Self::new(name, shape, init)
        }
    }

    /// A GPT-2 Conv1D weight (I, O), read only through `kernels::linear` as x·W.
    pub fn conv1d(name: impl Into<String>, shape: &[usize], init: Init) -> Self {
        Self {
            through_linear: true,
            ..Self::new(name, shape, init)
        }
    }

    /// Whether a store for `purpose` keeps this `nn.Linear` weight out of row-major (O, I)
    /// order, as a non-contiguous view the linear kernel reads in place (the estimator's flag:
    /// no tile copy, the same bytes). A [`Purpose::Forward`] store keeps it as (I, O) row-major
    /// under an (O, I) view (strides (1, O)) or in panels ([`ParamSpec::placement`]), so gemm
    /// gets a row-major right operand and `kernels::product` skips its per-call tile copy
    /// (15–20% of a 256-row product). Training keeps (O, I) row-major: its backward reads W
    /// row-major for dx, and the optimizer and the gradient sink expect the gradient's layout;
    /// generation too (see [`Purpose::Decode`]).
    pub fn stored_transposed(&self, purpose: Purpose) -> bool {
        self.linear && purpose == Purpose::Forward && self.shape.len() == 2
    }

    /// How a store for `purpose` holding `dtype` lays this parameter's values out in memory.
    /// An f32 [`Purpose::Forward`] store on a machine where gemm runs its AVX-512 or AVX2
    /// kernels keeps a weight read only through the linear kernel in strips when its out
    /// features allow (`kernels::panels`: 64 or 16 out features per strip, read by gemm with no
    /// packing); otherwise an `nn.Linear` weight transposed; everything else row-major.
    pub fn placement(&self, purpose: Purpose, dtype: DType) -> Placement {
        let out = if self.linear {
            self.shape.first()
        } else {
            self.shape.get(1)
        };
        let width = strips::width().filter(|&w| {
            purpose == Purpose::Forward
                && self.through_linear
                && self.shape.len() == 2
                && dtype == DType::F32
                && out.is_some_and(|&o| panels::fits(o, w))
        });
        if let Some(w) = width {
            Placement::Panels(w)
        } else if self.stored_transposed(purpose) {
            Placement::Transposed
        } else {
            Placement::RowMajor
        }
    }

    /// Where the element at row-major index `k` of this parameter goes under `placement`.
    fn position(&self, placement: Placement, k: usize) -> usize {
        match (placement, self.shape.as_slice()) {
            (Placement::Transposed, &[o, i]) => (k % i) * o + k / i, // (O, I) → (I, O)
            (Placement::Panels(w), &[_, i]) if self.linear => panels::index(k % i, k / i, i, w),
            (Placement::Panels(w), &[i, o]) => panels::index(k / o, k % o, i, w),
            _ => k,
        }
    }

    pub fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }
}

/// How a store lays a parameter's values out ([`ParamSpec::placement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In its own shape, row-major.
    RowMajor,
    /// An (O, I) `nn.Linear` weight as (I, O) row-major, under an (O, I) view.
    Transposed,
    /// Cut into strips of this many columns of the weight as (I, O) (`kernels::panels`),
    /// under a view with the weight's dims.
    Panels(usize),
}

/// Checkpoint name prefixes accepted in front of ours (`transformer.h.0…` for GPT2LMHeadModel).
const PREFIXES: [&str; 3] = ["", "transformer.", "model."];

/// Tensors a checkpoint may carry that are buffers, not parameters.
fn is_buffer(name: &str) -> bool {
    name.ends_with(".attn.bias")
        || name.ends_with(".attn.masked_bias")
        || name.ends_with("rotary_emb.inv_freq")
        || name.ends_with("position_ids")
        || name == "lm_head.weight" // tied heads are saved too; ours reads the embedding
}

pub struct ParamStore {
    tensors: BTreeMap<String, Tensor>,
    vars: Vec<Var>,
    taken: RefCell<BTreeSet<String>>,
}

impl ParamStore {
    /// Seeded random parameters: each tensor's stream depends only on the seed and its name.
    pub fn random(
        specs: &[ParamSpec],
        seed: u64,
        dtype: DType,
        purpose: Purpose,
    ) -> anyhow::Result<Self> {
        // Each tensor is drawn in f32 and cast at once, so a bf16/f16 store never holds more
        // than one f32 tensor per thread beside it (drawing them all first made a bf16 model's
        // load peak 2× its f32 size plus itself: cs336-small infer 508 MiB, its forward 310).
        let tensors: Vec<(String, Tensor)> = specs
            .par_iter()
            .map(|s| {
                let placement = s.placement(purpose, dtype);
                let values = init_values(s, seed, placement);
                Ok((s.name.clone(), tensor(values, s, placement, dtype)?))
            })
            .collect::<candle_core::Result<_>>()?;
        Self::build(tensors, purpose.trainable())
    }

    /// Checks, without reading any values, that a checkpoint holds every parameter of `specs`
    /// with its exact shape: what [`ParamStore::from_weights`] would refuse, found before any
    /// run starts (`sweep` refuses up front rather than give an error row per configuration).
    pub fn check_weights(specs: &[ParamSpec], weights: &WeightSet) -> anyhow::Result<()> {
        for spec in specs {
            let Some(info) = PREFIXES
                .iter()
                .find_map(|p| weights.info(&format!("{p}{}", spec.name)))
            else {
                bail!(
                    "--weights: tensor `{}` (shape {:?}) is missing from the checkpoint; it has {} tensors, e.g. {:?}",
                    spec.name,
                    spec.shape,
                    weights.names().len(),
                    weights.names().iter().take(3).collect::<Vec<_>>()
                );
            };
            if info.shape != spec.shape {
                bail!(
                    "--weights: tensor `{}` has shape {:?}, the model config needs {:?} (is --model/--config the checkpoint's architecture?)",
                    info.name,
                    info.shape,
                    spec.shape
                );
            }
        }
        Ok(())
    }

    /// Parameters read from a checkpoint. Every spec must be present with its exact shape;
    /// tensors the model does not use are returned as warnings.
    pub fn from_weights(
        specs: &[ParamSpec],
        weights: &WeightSet,
        dtype: DType,
        purpose: Purpose,
    ) -> anyhow::Result<(Self, Vec<String>)> {
        let mut used = BTreeSet::new();
        let mut tensors = Vec::with_capacity(specs.len());
        for spec in specs {
            let Some(found) = PREFIXES
                .iter()
                .map(|p| format!("{p}{}", spec.name))
                .find(|n| weights.info(n).is_some())
            else {
                bail!(
                    "--weights: tensor `{}` (shape {:?}) is missing from the checkpoint; it has {} tensors, e.g. {:?}",
                    spec.name,
                    spec.shape,
                    weights.names().len(),
                    weights.names().iter().take(3).collect::<Vec<_>>()
                );
            };
            let raw = weights.read(&found)?;
            if raw.shape != spec.shape {
                bail!(
                    "--weights: tensor `{found}` has shape {:?}, the model config needs {:?} (is --model/--config the checkpoint's architecture?)",
                    raw.shape,
                    spec.shape
                );
            }
            let placement = spec.placement(purpose, dtype);
            let values = match placement {
                Placement::RowMajor => raw.to_f32_vec(),
                p => raw.to_f32_vec_placed(|k| spec.position(p, k)),
            }
            .with_context(|| format!("--weights: tensor `{found}`"))?;
            used.insert(found);
            tensors.push((spec.name.clone(), tensor(values, spec, placement, dtype)?));
        }
        let unused: Vec<String> = weights
            .names()
            .into_iter()
            .filter(|n| !used.contains(n) && !is_buffer(n))
            .collect();
        let mut warnings = Vec::new();
        if !unused.is_empty() {
            warnings.push(format!(
                "--weights: {} tensor(s) in the checkpoint are not used by this model: {}",
                unused.len(),
                unused
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok((Self::build(tensors, purpose.trainable())?, warnings))
    }

    fn build(tensors: Vec<(String, Tensor)>, trainable: bool) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        let mut vars = Vec::new();
        for (name, t) in tensors {
            let t = if trainable {
                let v = Var::from_tensor(&t)?;
                let t = v.as_tensor().clone();
                vars.push(v);
                t
            } else {
                t
            };
            map.insert(name, t);
        }
        Ok(Self {
            tensors: map,
            vars,
            taken: RefCell::new(BTreeSet::new()),
        })
    }

    /// Mixed precision's working copy: every parameter cast to `dtype`. No variables of its
    /// own. The casts of the parameters named in `linear` (read only through `kernels::linear`,
    /// [`ParamSpec::through_linear`]) are detached and returned as `kernels::sink::Masters`: the linear
    /// kernel adds the weight gradient it made in f32 straight into the f32 master's, with no
    /// rounding to `dtype` and none of candle's cast backward. The others are recorded, so their
    /// gradients flow back through the cast to the f32 master variables.
    pub fn cast(
        &self,
        dtype: DType,
        linear: &BTreeSet<String>,
    ) -> candle_core::Result<(Self, Masters)> {
        let mut masters = Masters::new();
        let tensors = self
            .tensors
            .iter()
            .map(|(n, t)| {
                if !linear.contains(n) {
                    return Ok((n.clone(), t.to_dtype(dtype)?));
                }
                let c = crate::kernels::widen::cast_copy(t, dtype)?;
                masters.insert(c.id(), (t.id(), t.dtype()));
                Ok((n.clone(), c))
            })
            .collect::<candle_core::Result<_>>()?;
        let store = Self {
            tensors,
            vars: Vec::new(),
            taken: RefCell::new(BTreeSet::new()),
        };
        Ok((store, masters))
    }

    /// The parameter called `name`; a model asking for a name its spec list lacks is a bug.
    pub fn get(&self, name: &str) -> candle_core::Result<Tensor> {
        let t = self.tensors.get(name).cloned().ok_or_else(|| {
            candle_core::Error::Msg(format!("internal: no parameter named `{name}`"))
        })?;
        self.taken.borrow_mut().insert(name.to_string());
        Ok(t)
    }

    /// Names created but never taken by the model (must be empty once a model is loaded).
    pub fn untaken(&self) -> Vec<String> {
        let taken = self.taken.borrow();
        self.tensors
            .keys()
            .filter(|k| !taken.contains(*k))
            .cloned()
            .collect()
    }

    /// Trainable variables (empty for inference stores).
    pub fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }

    pub fn tensors(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        self.tensors.iter()
    }

    pub fn param_count(&self) -> u64 {
        self.tensors.values().map(|t| t.elem_count() as u64).sum()
    }

    pub fn param_bytes(&self) -> u64 {
        self.tensors
            .values()
            .map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64)
            .sum()
    }
}

/// The parameter `spec` from its values in memory order ([`Placement`]), as a tensor with its
/// own dims (a view for a transposed or panelled weight).
fn tensor(
    values: Vec<f32>,
    spec: &ParamSpec,
    placement: Placement,
    dtype: DType,
) -> candle_core::Result<Tensor> {
    let dev = &Device::Cpu;
    match (placement, spec.shape.as_slice()) {
        (Placement::Transposed, &[o, i]) => {
            // (I, O) row-major → (O, I) view, strides (1, O)
            Tensor::from_vec(values, (i, o), dev)?.to_dtype(dtype)?.t()
        }
        (Placement::Panels(w), &[a, b]) => {
            let (o, i) = if spec.linear { (a, b) } else { (b, a) };
            let buffer = Tensor::from_vec(values, (o / w, i, w), dev)?;
            panels::view(buffer.to_dtype(dtype)?, spec.linear)
        }
        _ => Tensor::from_vec(values, spec.shape.as_slice(), dev)?.to_dtype(dtype),
    }
}

fn name_hash(name: &str) -> u64 {
    // FNV-1a: stable across runs and platforms, unlike std's RandomState.
    name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// The seeded values of `spec`, drawn in row-major order and placed by `placement`: one
/// buffer either way.
fn init_values(spec: &ParamSpec, seed: u64, placement: Placement) -> Vec<f32> {
    let n = spec.elem_count();
    match spec.init {
        Init::Ones => vec![1.0; n],
        Init::Zeros => vec![0.0; n],
        Init::Normal(std) => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ name_hash(&spec.name));
            // std is a positive constant from the model code: Normal::new cannot fail.
            let dist = Normal::new(0.0f32, std).expect("positive std");
            if placement == Placement::RowMajor {
                return (0..n).map(|_| dist.sample(&mut rng)).collect();
            }
            let mut out = vec![0f32; n];
            for k in 0..n {
                out[spec.position(placement, k)] = dist.sample(&mut rng);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both weight layouts placed in strips of either width hold the values drawn row-major,
    /// on any machine (the store chooses the width gemm's kernel reads).
    #[test]
    fn panelled_weights_hold_the_row_major_draw_under_their_own_dims() {
        let specs = [
            ParamSpec::linear("w", &[128, 5], Init::Normal(1.0)),
            ParamSpec::conv1d("w", &[5, 128], Init::Normal(1.0)),
        ];
        for (spec, w) in specs
            .iter()
            .flat_map(|s| strips::WIDTHS.map(|w| (s.clone(), w)))
        {
            let want = tensor(
                init_values(&spec, 3, Placement::RowMajor),
                &spec,
                Placement::RowMajor,
                DType::F32,
            )
            .unwrap();
            let got = tensor(
                init_values(&spec, 3, Placement::Panels(w)),
                &spec,
                Placement::Panels(w),
                DType::F32,
            )
            .unwrap();
            assert_eq!(got.rank(), 3, "a view of the (O/w, I, w) buffer");
            let got = got.contiguous().unwrap().reshape(want.shape()).unwrap();
            assert_eq!(
                got.to_vec2::<f32>().unwrap(),
                want.to_vec2::<f32>().unwrap(),
                "linear: {}, width {w}",
                spec.linear
            );
        }
    }

    #[test]
    fn panels_only_for_f32_forward_stores_of_whole_strips_where_gemm_reads_them() {
        let lin = ParamSpec::linear("w", &[128, 5], Init::Normal(1.0));
        let f32_forward = strips::width().map_or(Placement::Transposed, Placement::Panels);
        assert_eq!(lin.placement(Purpose::Forward, DType::F32), f32_forward);
        assert_eq!(
            lin.placement(Purpose::Forward, DType::BF16),
            Placement::Transposed
        );
        assert_eq!(
            lin.placement(Purpose::Train, DType::F32),
            Placement::RowMajor
        );
        assert_eq!(
            lin.placement(Purpose::Decode, DType::F32),
            Placement::RowMajor
        );
        let odd = ParamSpec::linear("w", &[100, 5], Init::Normal(1.0));
        assert_eq!(
            odd.placement(Purpose::Forward, DType::F32),
            Placement::Transposed
        );
        let embedding = ParamSpec::new("e", &[128, 5], Init::Normal(1.0));
        assert_eq!(
            embedding.placement(Purpose::Forward, DType::F32),
            Placement::RowMajor
        );
    }
}
