//! reacher2d camera frames for a batch of scenes in one dispatch.

use bytemuck::{Pod, Zeroable};
use imago_robots::Image;
use imago_robots::reacher2d::render::{
    BACKGROUND, BASE, BASE_RADIUS, END_EFFECTOR, END_EFFECTOR_RADIUS, LINK_HALF_WIDTH, LOWER_LINK,
    UPPER_LINK,
};
use imago_robots::reacher2d::{Scene, TargetColour};
use wgpu::util::DeviceExt;

use crate::{GpuContext, ShaderError};

/// Side of a workgroup's square of pixels (the shader's `@workgroup_size`).
const WORKGROUP: u32 = 8;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    size: u32,
    count: u32,
    half_extent: f32,
    pixel: f32,
}

/// A scene as the shader reads it (see `Scene` in reacher2d.wgsl).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct GpuScene {
    elbow: [f32; 2],
    end_effector: [f32; 2],
    targets: [[f32; 2]; 3],
    target_radius: f32,
    pad: f32,
}

impl From<&Scene> for GpuScene {
    fn from(scene: &Scene) -> Self {
        let elbow = scene.arm.elbow(scene.q);
        let ee = scene.arm.end_effector(scene.q);
        Self {
            elbow: [elbow.x, elbow.y],
            end_effector: [ee.x, ee.y],
            targets: scene.targets.map(|t| [t.x, t.y]),
            target_radius: scene.target_radius,
            pad: 0.0,
        }
    }
}

/// The WGSL source with the CPU renderer's colours and radii substituted, so the
/// two renderers share one set of constants.
fn shader_source() -> String {
    let rgb = |c: [u8; 3]| format!("{}u, {}u, {}u", c[0], c[1], c[2]);
    let metres = |v: f32| format!("{v:?}");
    [
        ("@BACKGROUND@", rgb(BACKGROUND)),
        ("@UPPER_LINK@", rgb(UPPER_LINK)),
        ("@LOWER_LINK@", rgb(LOWER_LINK)),
        ("@BASE@", rgb(BASE)),
        ("@END_EFFECTOR@", rgb(END_EFFECTOR)),
        ("@RED@", rgb(TargetColour::Red.rgb())),
        ("@GREEN@", rgb(TargetColour::Green.rgb())),
        ("@BLUE@", rgb(TargetColour::Blue.rgb())),
        ("@LINK_HALF_WIDTH@", metres(LINK_HALF_WIDTH)),
        ("@BASE_RADIUS@", metres(BASE_RADIUS)),
        ("@END_EFFECTOR_RADIUS@", metres(END_EFFECTOR_RADIUS)),
    ]
    .iter()
    .fold(
        include_str!("reacher2d.wgsl").to_string(),
        |source, (name, value)| source.replace(name, value),
    )
}

/// Renders reacher2d camera frames for many scenes in one compute dispatch.
pub struct Reacher2dRenderer {
    gpu: GpuContext,
    pipeline: wgpu::ComputePipeline,
}

impl Reacher2dRenderer {
    /// Builds the pipeline on `gpu`.
    pub fn new(gpu: GpuContext) -> Self {
        let module = gpu
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("reacher2d camera"),
                source: wgpu::ShaderSource::Wgsl(shader_source().into()),
            });
        let pipeline = gpu
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("reacher2d camera"),
                layout: None,
                module: &module,
                entry_point: Some("render"),
                compilation_options: Default::default(),
                cache: None,
            });
        Self { gpu, pipeline }
    }

    /// The device it renders on.
    pub fn gpu(&self) -> &GpuContext {
        &self.gpu
    }

    /// The frame of every scene, as [`imago_robots::reacher2d::render`] draws it:
    /// the square `[-half_extent, half_extent]^2` (metres, y up) on `size x size`
    /// pixels.
    pub fn render(
        &self,
        scenes: &[Scene],
        size: u32,
        half_extent: f32,
    ) -> Result<Vec<Image>, ShaderError> {
        if scenes.is_empty() || size == 0 {
            return Ok(scenes
                .iter()
                .map(|_| Image::filled(size, size, BACKGROUND))
                .collect());
        }
        let limits = self.gpu.device.limits();
        let count = u32::try_from(scenes.len())
            .ok()
            .filter(|&n| n <= limits.max_compute_workgroups_per_dimension)
            .ok_or_else(|| {
                ShaderError::TooLarge(format!(
                    "{} scenes in one dispatch; this device takes at most {}",
                    scenes.len(),
                    limits.max_compute_workgroups_per_dimension
                ))
            })?;
        let pixels = size as u64 * size as u64 * count as u64;
        let bytes = pixels * 4;
        if bytes > limits.max_storage_buffer_binding_size {
            return Err(ShaderError::TooLarge(format!(
                "{count} frames of {size}x{size} need {bytes} bytes; this device binds at most {}",
                limits.max_storage_buffer_binding_size
            )));
        }
        let device = &self.gpu.device;
        let params = Params {
            size,
            count,
            half_extent,
            pixel: 2.0 * half_extent / size as f32,
        };
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("reacher2d params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let gpu_scenes: Vec<GpuScene> = scenes.iter().map(GpuScene::from).collect();
        let scenes_buffer = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("reacher2d scenes"),
            contents: bytemuck::cast_slice(&gpu_scenes),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let output = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("reacher2d frames"),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("reacher2d readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("reacher2d bindings"),
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: params.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: scenes_buffer.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: output.as_entire_binding(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("reacher2d render"),
        });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("reacher2d render"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            let tiles = size.div_ceil(WORKGROUP);
            pass.dispatch_workgroups(tiles, tiles, count);
        }
        encoder.copy_buffer_to_buffer(&output, 0, &readback, 0, bytes);
        self.gpu.queue.submit([encoder.finish()]);
        let slice = readback.slice(..);
        let (sender, receiver) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |result| {
            let _ = sender.send(result);
        });
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| ShaderError::Readback(e.to_string()))?;
        receiver
            .recv()
            .map_err(|e| ShaderError::Readback(e.to_string()))?
            .map_err(|e| ShaderError::Readback(e.to_string()))?;
        let packed: Vec<u32> = bytemuck::cast_slice(&slice.get_mapped_range()).to_vec();
        readback.unmap();
        let frame = (size * size) as usize;
        Ok(packed
            .chunks(frame)
            .map(|pixels| Image {
                width: size,
                height: size,
                rgb: pixels
                    .iter()
                    .flat_map(|&p| [p as u8, (p >> 8) as u8, (p >> 16) as u8])
                    .collect(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use imago_robots::reacher2d::{Reacher2d, render};
    use imago_robots::{Action, Robot};

    use super::*;

    /// Scenes from several seeds, each a few random steps in.
    fn scenes(count: u64) -> Vec<Scene> {
        let mut robot = Reacher2d::default();
        (0..count)
            .map(|seed| {
                robot.reset(seed);
                for k in 0..(seed % 7) {
                    let angle = (seed * 3 + k) as f32;
                    robot.step(&Action(vec![angle.cos(), angle.sin()]));
                }
                robot.scene()
            })
            .collect()
    }

    fn renderer() -> Option<Reacher2dRenderer> {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        match GpuContext::new() {
            Ok(gpu) => Some(Reacher2dRenderer::new(gpu)),
            Err(e) if !in_ci => {
                eprintln!("skipped: {e}");
                None
            }
            Err(e) => panic!("CI needs a wgpu adapter (install mesa-vulkan-drivers): {e}"),
        }
    }

    #[test]
    fn batched_frames_match_the_cpu_renderer() {
        let Some(renderer) = renderer() else {
            return;
        };
        let scenes = scenes(64);
        let config = Reacher2d::default().config().clone();
        let (size, extent) = (config.image_size, config.view_half_extent);
        let frames = renderer.render(&scenes, size, extent).unwrap();
        assert_eq!(frames.len(), scenes.len());
        let (mut differing, mut total) = (0usize, 0usize);
        for (scene, frame) in scenes.iter().zip(&frames) {
            let reference = render(scene, size, extent);
            assert_eq!((frame.width, frame.height), (size, size));
            for (gpu, cpu) in frame.rgb.chunks(3).zip(reference.rgb.chunks(3)) {
                differing += (gpu != cpu) as usize;
                total += 1;
            }
        }
        // Only pixels whose centre lies on a shape's edge may round the other way.
        assert!(
            differing * 1000 <= total,
            "{differing} of {total} pixels differ on {}",
            renderer.gpu().description()
        );
        eprintln!(
            "{}: {differing} of {total} pixels differ",
            renderer.gpu().description()
        );
    }

    #[test]
    fn empty_batches_and_oversized_requests_are_answered_without_a_dispatch() {
        let Some(renderer) = renderer() else {
            return;
        };
        assert!(renderer.render(&[], 48, 1.0).unwrap().is_empty());
        let too_many = renderer
            .gpu()
            .device
            .limits()
            .max_compute_workgroups_per_dimension as usize
            + 1;
        let scene = scenes(1).remove(0);
        let error = renderer
            .render(&vec![scene; too_many], 1, 1.0)
            .err()
            .unwrap();
        assert!(matches!(error, ShaderError::TooLarge(_)), "{error}");
    }
}
