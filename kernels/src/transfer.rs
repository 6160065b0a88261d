//! Moving burn tensors to and from cubecl buffers. A tensor of a plain CubeCL backend
//! (`CubeBackend<R>`, e.g. `CubeBackend<WgpuRuntime>` or `CubeBackend<CudaRuntime>`)
//! hands its buffer over without a copy; any other tensor on a GPU device (burn's
//! `Dispatch` and fusion backends hide their buffers) goes through host memory once
//! each way.

use std::any::{Any, TypeId};

use burn::prelude::*;
use burn::tensor::{DType, TensorData, TensorMetadata, TensorPrimitive};
use burn_cubecl::CubeRuntime;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::{ComputeClient, CubeElement};
use cubecl::server::Handle;

/// Whether `B`'s float tensors are `CubeTensor<R>`: the zero-copy case.
fn is_cube<B: Backend, R: CubeRuntime>() -> bool {
    TypeId::of::<B::FloatTensorPrimitive>() == TypeId::of::<CubeTensor<R>>()
}

/// The values of `tensor` as host `f32`s, row-major.
pub(crate) fn host<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("data converted to f32 reads back as f32")
}

/// A tensor of `B` on `device` holding `values` in `shape`.
pub(crate) fn from_host<B: Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// `tensor` as a contiguous `f32` buffer of `client`.
pub(crate) fn upload<B: Backend, R: CubeRuntime, const D: usize>(
    tensor: Tensor<B, D>,
    client: &ComputeClient<R>,
) -> Handle {
    let primitive = tensor.into_primitive().tensor();
    if is_cube::<B, R>() && primitive.dtype() == DType::F32 {
        let cube = (Box::new(primitive) as Box<dyn Any>)
            .downcast::<CubeTensor<R>>()
            .expect("the type was checked");
        return into_contiguous(*cube).handle;
    }
    let tensor = Tensor::<B, D>::from_primitive(TensorPrimitive::Float(primitive));
    client.create_from_slice(f32::as_bytes(&host(tensor)))
}

/// A tensor of `B` on `device` over the `f32` buffer `handle` of `client`.
pub(crate) fn download<B: Backend, R: CubeRuntime, const D: usize>(
    handle: Handle,
    shape: [usize; D],
    client: &ComputeClient<R>,
    cube_device: &R::Device,
    device: &B::Device,
) -> Tensor<B, D> {
    if is_cube::<B, R>() {
        let cube = CubeTensor::<R>::new_contiguous(
            client.clone(),
            cube_device.clone(),
            Shape::from(shape),
            handle,
            DType::F32,
        );
        let primitive = (Box::new(cube) as Box<dyn Any>)
            .downcast::<B::FloatTensorPrimitive>()
            .expect("the type was checked");
        return Tensor::from_primitive(TensorPrimitive::Float(*primitive));
    }
    let len = shape.iter().product::<usize>();
    let bytes = client
        .read_one(handle)
        .unwrap_or_else(|error| panic!("reading a kernel's output back failed: {error:?}"));
    let values = f32::from_bytes(&bytes)[..len].to_vec();
    from_host(values, shape, device)
}
