//! Camera frames from a LeRobot dataset's MP4 files: demuxed by rerun's `re_video`,
//! AV1 decoded by `re_rav1d` (dav1d in pure Rust: no nasm, no system library) and
//! converted from YUV to RGB. Other codecs are refused with an error that names the
//! codec and says how to convert the file.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use imago_robots::Image;
use re_rav1d::dav1d;
use re_video::{Time, Timescale, VideoCodec, VideoDataDescription, VideoSource};

/// A decoded frame and when it is shown, in seconds from the file's start.
pub struct TimedFrame {
    /// Presentation time.
    pub seconds: f64,
    /// The picture.
    pub image: Image,
}

/// Reads one MP4 file's frames forward, in presentation order.
pub struct VideoReader {
    path: PathBuf,
    bytes: Vec<u8>,
    samples: Vec<(std::ops::Range<usize>, Time)>,
    timescale: Timescale,
    next_sample: usize,
    decoder: dav1d::Decoder,
    ready: VecDeque<TimedFrame>,
    flushed: bool,
    /// The last frame handed out, for a second request of the same time.
    last: Option<(f64, Image)>,
    /// Frames decoded.
    pub decoded: u64,
}

impl VideoReader {
    /// Opens the MP4 file at `path`; the error names the file and, for a codec other
    /// than AV1, the codec.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read the video ({e})", path.display()))?;
        let shown = path.display().to_string();
        let video = VideoDataDescription::load_from_bytes(&bytes, "video/mp4", &shown).map_err(
            |e| anyhow::anyhow!("{shown}: not a readable MP4 video ({e}); it is damaged or was not written completely"),
        )?;
        if video.codec != VideoCodec::AV1 {
            anyhow::bail!(
                "{shown}: the video is {}; imago decodes AV1 (LeRobot's default) and PNG image features. Convert it with `ffmpeg -i IN.mp4 -c:v libsvtav1 -pix_fmt yuv420p -g 2 OUT.mp4` (keeping the file name), or record the dataset with `vcodec=\"libsvtav1\"`",
                video.human_readable_codec_string()
            );
        }
        let timescale = video
            .timescale
            .ok_or_else(|| anyhow::anyhow!("{shown}: the video has no timescale"))?;
        let samples = video
            .samples
            .iter()
            .filter_map(|s| s.sample())
            .map(|s| match s.source {
                VideoSource::Span(span) => {
                    let start = span.start as usize;
                    Ok((start..start + span.len as usize, s.presentation_timestamp))
                }
                VideoSource::Id { .. } => {
                    Err(anyhow::anyhow!("{shown}: a sample outside the file"))
                }
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(
            samples.iter().all(|(range, _)| range.end <= bytes.len()),
            "{shown}: the video's sample table points past the end of the file; it was cut short"
        );
        let mut settings = dav1d::Settings::new();
        settings.set_n_threads(1);
        settings.set_max_frame_delay(1);
        let decoder = dav1d::Decoder::with_settings(&settings)
            .map_err(|e| anyhow::anyhow!("{shown}: cannot start the AV1 decoder ({e})"))?;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
            samples,
            timescale,
            next_sample: 0,
            decoder,
            ready: VecDeque::new(),
            flushed: false,
            last: None,
            decoded: 0,
        })
    }

    /// The frame shown at `seconds` (within `tolerance`): frames before it are skipped.
    /// The error says which time has no frame.
    pub fn frame_at(&mut self, seconds: f64, tolerance: f64) -> anyhow::Result<Image> {
        if let Some((at, image)) = &self.last
            && (at - seconds).abs() <= tolerance
        {
            return Ok(image.clone());
        }
        while let Some(frame) = self.next_frame()? {
            if frame.seconds < seconds - tolerance {
                continue;
            }
            self.last = Some((frame.seconds, frame.image.clone()));
            anyhow::ensure!(
                frame.seconds <= seconds + tolerance,
                "{}: no frame at {seconds:.4} s (the next one is at {:.4} s)",
                self.path.display(),
                frame.seconds
            );
            return Ok(frame.image);
        }
        anyhow::bail!(
            "{}: the video ends before {seconds:.4} s",
            self.path.display()
        )
    }

    /// Whether a request for `seconds` needs the file read again from its start.
    pub fn is_past(&self, seconds: f64, tolerance: f64) -> bool {
        self.last
            .as_ref()
            .is_some_and(|(at, _)| *at > seconds + tolerance)
    }

    fn next_frame(&mut self) -> anyhow::Result<Option<TimedFrame>> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            if self.next_sample == self.samples.len() {
                if self.flushed {
                    return Ok(None);
                }
                self.flushed = true;
                self.collect_pictures()?;
                continue;
            }
            let (range, pts) = self.samples[self.next_sample].clone();
            self.next_sample += 1;
            let mut sent =
                self.decoder
                    .send_data(self.bytes[range].to_vec(), None, Some(pts.0), None);
            // `Again`: the decoder holds pictures to hand out before it takes more data.
            let mut stalls = 0;
            while matches!(sent, Err(dav1d::Error::Again)) {
                let before = self.ready.len();
                self.collect_pictures()?;
                stalls = if self.ready.len() == before {
                    stalls + 1
                } else {
                    0
                };
                anyhow::ensure!(
                    stalls < 1000,
                    "{}: the AV1 decoder takes no more data",
                    self.path.display()
                );
                sent = self.decoder.send_pending_data();
            }
            if let Err(e) = sent {
                anyhow::bail!("{}: the AV1 stream is damaged ({e})", self.path.display());
            }
            self.collect_pictures()?;
        }
    }

    /// Moves every picture the decoder has ready into `ready`.
    fn collect_pictures(&mut self) -> anyhow::Result<()> {
        loop {
            match self.decoder.get_picture() {
                Ok(picture) => {
                    self.decoded += 1;
                    let seconds = Time(picture.timestamp().unwrap_or(0)).into_secs(self.timescale);
                    let image = to_rgb(&picture)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", self.path.display()))?;
                    self.ready.push_back(TimedFrame { seconds, image });
                }
                Err(dav1d::Error::Again) => return Ok(()),
                Err(e) => anyhow::bail!("{}: the AV1 stream is damaged ({e})", self.path.display()),
            }
        }
    }
}

/// An 8-bit RGB image of a decoded picture (BT.709 or BT.601 as the stream says,
/// limited or full range; 10- and 12-bit pictures are reduced to 8 bits). Integer
/// arithmetic with 16 fractional bits, one row of chroma at a time.
fn to_rgb(picture: &dav1d::Picture) -> Result<Image, String> {
    use dav1d::{PixelLayout, PlanarImageComponent as C};
    let (width, height) = (picture.width() as usize, picture.height() as usize);
    let depth = picture.bit_depth();
    let layout = picture.pixel_layout();
    let (sx, sy) = match layout {
        PixelLayout::I420 => (1, 1),
        PixelLayout::I422 => (1, 0),
        PixelLayout::I444 | PixelLayout::I400 => (0, 0),
    };
    let planes = |c: C| (picture.plane(c), picture.stride(c) as usize);
    let (y_plane, y_stride) = planes(C::Y);
    let chroma = (layout != PixelLayout::I400).then(|| (planes(C::U), planes(C::V)));
    let matrix = YuvMatrix::new(
        matches!(
            picture.matrix_coefficients(),
            dav1d::pixel::MatrixCoefficients::BT709
        ),
        matches!(picture.color_range(), dav1d::pixel::YUVRange::Full),
    );
    // One row of a plane as 8-bit samples.
    let row = |plane: &[u8], stride: usize, y: usize, samples: usize, out: &mut Vec<u8>| {
        out.clear();
        let start = y * stride;
        if depth > 8 {
            let shift = depth - 8;
            let bytes = plane
                .get(start..start + 2 * samples)
                .ok_or("a decoded plane is too short")?;
            out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| (u16::from_le_bytes([b[0], b[1]]) >> shift).min(255) as u8),
            );
        } else {
            out.extend_from_slice(
                plane
                    .get(start..start + samples)
                    .ok_or("a decoded plane is too short")?,
            );
        }
        Ok::<(), String>(())
    };
    let chroma_width = (width + sx) >> sx;
    let (mut ys, mut us, mut vs) = (Vec::new(), Vec::new(), vec![128u8; chroma_width]);
    let mut rgb = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        row(&y_plane, y_stride, y, width, &mut ys)?;
        match &chroma {
            Some(((u, u_stride), (v, v_stride))) => {
                row(u, *u_stride, y >> sy, chroma_width, &mut us)?;
                row(v, *v_stride, y >> sy, chroma_width, &mut vs)?;
            }
            None => us = vec![128; chroma_width],
        }
        for (x, &luma) in ys.iter().enumerate() {
            rgb.extend(matrix.rgb(luma, us[x >> sx], vs[x >> sx]));
        }
    }
    Ok(Image {
        width: width as u32,
        height: height as u32,
        rgb,
    })
}

/// YUV to RGB coefficients in fixed point (16 fractional bits).
struct YuvMatrix {
    luma_offset: i32,
    luma_scale: i32,
    r_from_v: i32,
    g_from_u: i32,
    g_from_v: i32,
    b_from_u: i32,
}

impl YuvMatrix {
    fn new(bt709: bool, full_range: bool) -> Self {
        let (kr, kb) = if bt709 {
            (0.2126, 0.0722)
        } else {
            (0.299, 0.114)
        };
        let kg = 1.0 - kr - kb;
        let (luma_scale, chroma_scale, luma_offset) = if full_range {
            (1.0, 1.0, 0)
        } else {
            (255.0 / 219.0, 255.0 / 224.0, 16)
        };
        let fixed = |v: f64| (v * 65536.0).round() as i32;
        Self {
            luma_offset,
            luma_scale: fixed(luma_scale),
            r_from_v: fixed(chroma_scale * 2.0 * (1.0 - kr)),
            g_from_u: fixed(chroma_scale * 2.0 * (1.0 - kb) * kb / kg),
            g_from_v: fixed(chroma_scale * 2.0 * (1.0 - kr) * kr / kg),
            b_from_u: fixed(chroma_scale * 2.0 * (1.0 - kb)),
        }
    }

    fn rgb(&self, y: u8, u: u8, v: u8) -> [u8; 3] {
        let l = (y as i32 - self.luma_offset) * self.luma_scale + (1 << 15);
        let (u, v) = (u as i32 - 128, v as i32 - 128);
        let clamp = |x: i32| (x >> 16).clamp(0, 255) as u8;
        [
            clamp(l + self.r_from_v * v),
            clamp(l - self.g_from_u * u - self.g_from_v * v),
            clamp(l + self.b_from_u * u),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::YuvMatrix;

    #[test]
    fn yuv_to_rgb_follows_the_matrices() {
        // Limited-range BT.601: black, white, and pure red as (Y, U, V) = (81, 90, 240).
        let m = YuvMatrix::new(false, false);
        assert_eq!(m.rgb(16, 128, 128), [0, 0, 0]);
        assert_eq!(m.rgb(235, 128, 128), [255, 255, 255]);
        let red = m.rgb(81, 90, 240);
        assert!(red[0] >= 253 && red[1] <= 2 && red[2] <= 2, "{red:?}");
        // Full-range BT.709 grey stays grey.
        assert_eq!(
            YuvMatrix::new(true, true).rgb(100, 128, 128),
            [100, 100, 100]
        );
    }
}
