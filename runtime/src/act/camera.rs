//! Camera frames of many simulated robots: drawn by each robot on the CPU, or, when
//! the models run on a wgpu GPU and many robots step in lock-step, by the robot's
//! batched renderer in one dispatch per tick (`imago_shaders`, docs/kernels.md).

use burn::prelude::*;
use imago_kernels::devices::is_wgpu;
use imago_robots::{FrameSource, Observation};
use imago_shaders::GpuContext;

use crate::robot::{BatchRenderer, RobotConfig, SimRobot};

/// Who renders the frames of a batch of robots.
pub enum BatchCamera {
    /// Each robot renders its own frame on the CPU.
    PerRobot,
    /// One dispatch of the robot's batched renderer per tick for the whole batch.
    Batched(BatchRenderer),
}

impl BatchCamera {
    /// Below this many robots per tick the CPU renderer is as fast as one dispatch on
    /// a software adapter (`imago bench --what render`: 64 scenes, 1.8 ms each way).
    pub const MIN_BATCH: usize = 64;

    /// The camera for `robots` robots of `robot`'s config whose policy runs on
    /// `device`: batched when the device is a wgpu GPU, the batch is at least
    /// [`Self::MIN_BATCH`] and the robot has a batched renderer; per robot otherwise
    /// (and, with a warning, when the wgpu renderer cannot start).
    pub fn for_device<B: Backend>(device: &B::Device, robot: &RobotConfig, robots: usize) -> Self {
        if robots < Self::MIN_BATCH || !is_wgpu(device) {
            return Self::PerRobot;
        }
        match GpuContext::new() {
            Ok(gpu) => BatchRenderer::new(robot, gpu).map_or(Self::PerRobot, Self::Batched),
            Err(error) => {
                tracing::warn!("camera frames stay on the CPU: {error}");
                Self::PerRobot
            }
        }
    }

    /// The frame source robots of this batch use.
    pub fn frame_source(&self) -> FrameSource {
        match self {
            Self::PerRobot => FrameSource::Robot,
            Self::Batched(_) => FrameSource::Caller,
        }
    }

    /// Fills in the frame of each observation from its robot's scene (one dispatch);
    /// nothing to do when robots draw their own.
    pub fn fill<'a>(
        &self,
        batch: impl IntoIterator<Item = (&'a SimRobot, &'a mut Observation)>,
    ) -> anyhow::Result<()> {
        let Self::Batched(renderer) = self else {
            return Ok(());
        };
        let (robots, observations): (Vec<&SimRobot>, Vec<&mut Observation>) =
            batch.into_iter().unzip();
        let frames = renderer.render(&robots)?;
        for (observation, frame) in observations.into_iter().zip(frames) {
            observation.image = Some(frame);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};
    use imago_robots::{Action, Robot};

    use super::*;

    /// Fails unless `drawn` is `expected` up to 0.1% of pixels (pixel centres exactly
    /// on a shape's edge may round the other way on some GPUs; 0 differ on lavapipe).
    pub(crate) fn assert_same_frame(drawn: &imago_robots::Image, expected: &imago_robots::Image) {
        assert_eq!(drawn.rgb.len(), expected.rgb.len());
        let differing = drawn
            .rgb
            .chunks(3)
            .zip(expected.rgb.chunks(3))
            .filter(|(a, b)| a != b)
            .count();
        assert!(
            differing * 1000 <= expected.rgb.len() / 3,
            "{differing} pixels differ"
        );
    }

    /// The batched renderer, or `None` (a skip) without a wgpu adapter; under
    /// `CI=true` a missing adapter fails.
    pub(crate) fn batched() -> Option<BatchCamera> {
        match GpuContext::new() {
            Ok(gpu) => BatchRenderer::new(&RobotConfig::default(), gpu).map(BatchCamera::Batched),
            Err(error) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "no wgpu adapter under CI=true: {error}"
                );
                eprintln!("skipped: {error}");
                None
            }
        }
    }

    #[test]
    fn batched_frames_equal_the_robots_own() {
        let Some(camera) = batched() else { return };
        let mut robots: Vec<SimRobot> = (0..70)
            .map(|_| {
                let mut robot = RobotConfig::default().build().unwrap();
                robot.set_frame_source(camera.frame_source());
                robot
            })
            .collect();
        let mut observations: Vec<Observation> = robots
            .iter_mut()
            .enumerate()
            .map(|(seed, robot)| {
                robot.reset(seed as u64);
                robot.step(&Action(vec![0.4, -0.3])).observation
            })
            .collect();
        assert!(observations.iter().all(|o| o.image.is_none()));
        camera
            .fill(robots.iter().zip(observations.iter_mut()))
            .unwrap();
        for (robot, observation) in robots.iter().zip(&observations) {
            let own = robot.render_frame().expect("a camera");
            let drawn = observation.image.as_ref().expect("filled in");
            assert_same_frame(drawn, &own);
        }
    }

    #[test]
    fn only_large_batches_on_a_wgpu_device_are_batched() {
        let cpu = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        assert!(matches!(
            BatchCamera::for_device::<Dispatch>(&cpu, &RobotConfig::default(), 1000),
            BatchCamera::PerRobot
        ));
        if batched().is_none() {
            return;
        }
        let wgpu = DispatchDevice::Wgpu(Default::default());
        assert!(matches!(
            BatchCamera::for_device::<Dispatch>(
                &wgpu,
                &RobotConfig::default(),
                BatchCamera::MIN_BATCH - 1
            ),
            BatchCamera::PerRobot
        ));
        assert!(matches!(
            BatchCamera::for_device::<Dispatch>(
                &wgpu,
                &RobotConfig::default(),
                BatchCamera::MIN_BATCH
            ),
            BatchCamera::Batched(_)
        ));
    }
}
