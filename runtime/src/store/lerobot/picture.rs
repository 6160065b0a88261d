//! Camera frames as LeRobot stores images: PNG bytes, decoded to and encoded from
//! imago's 8-bit RGB [`Image`], and resized on request (`--resize`).

use imago_robots::Image;

/// Decodes PNG bytes (any colour type and depth) to 8-bit RGB.
pub fn decode_png(bytes: &[u8]) -> Result<Image, String> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("not a readable PNG ({e})"))?;
    let mut buffer = vec![
        0;
        reader
            .output_buffer_size()
            .ok_or("a PNG too large to decode")?
    ];
    let info = reader
        .next_frame(&mut buffer)
        .map_err(|e| format!("not a readable PNG ({e})"))?;
    let pixels = &buffer[..info.buffer_size()];
    let rgb = match info.color_type {
        png::ColorType::Rgb => pixels.to_vec(),
        png::ColorType::Rgba => pixels
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => pixels.iter().flat_map(|&g| [g, g, g]).collect(),
        png::ColorType::GrayscaleAlpha => pixels
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        png::ColorType::Indexed => return Err("an indexed PNG that was not expanded".into()),
    };
    Ok(Image {
        width: info.width,
        height: info.height,
        rgb,
    })
}

/// Encodes an RGB frame as PNG (fast compression: exports are written once per frame).
pub fn encode_png(image: &Image) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, image.width, image.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer
            .write_image_data(&image.rgb)
            .map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// `image` resized to `width` x `height`: each output pixel averages the input pixels
/// its area covers (box filter), so that shrinking does not alias.
pub fn resize(image: &Image, width: u32, height: u32) -> Image {
    if image.width == width && image.height == height {
        return image.clone();
    }
    let (sw, sh) = (image.width as usize, image.height as usize);
    let (dw, dh) = (width as usize, height as usize);
    let mut rgb = Vec::with_capacity(dw * dh * 3);
    for y in 0..dh {
        let y0 = y * sh / dh;
        let y1 = ((y + 1) * sh).div_ceil(dh).max(y0 + 1);
        for x in 0..dw {
            let x0 = x * sw / dw;
            let x1 = ((x + 1) * sw).div_ceil(dw).max(x0 + 1);
            let mut sum = [0u32; 3];
            for yy in y0..y1 {
                for xx in x0..x1 {
                    let i = (yy * sw + xx) * 3;
                    for (total, &v) in sum.iter_mut().zip(&image.rgb[i..i + 3]) {
                        *total += v as u32;
                    }
                }
            }
            let n = ((y1 - y0) * (x1 - x0)) as u32;
            rgb.extend(sum.map(|s| ((s + n / 2) / n) as u8));
        }
    }
    Image { width, height, rgb }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_round_trips_and_resize_averages() {
        let mut image = Image::filled(4, 2, [10, 20, 30]);
        image.rgb[0] = 250;
        let back = decode_png(&encode_png(&image).unwrap()).unwrap();
        assert_eq!(back, image);
        let small = resize(&image, 2, 1);
        assert_eq!((small.width, small.height), (2, 1));
        // The left output pixel averages 4 inputs, one of which has red 250.
        assert_eq!(
            small.pixel(0, 0),
            [((250u32 + 3 * 10 + 2) / 4) as u8, 20, 30]
        );
        assert_eq!(small.pixel(1, 0), [10, 20, 30]);
        assert!(decode_png(b"not a png").is_err());
    }
}
