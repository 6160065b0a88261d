//! pygame's rasterisation rules on a square RGB canvas: the three primitives
//! gym-pusht's drawing is made of (a filled polygon, a thick line, a filled circle),
//! each filling exactly the pixels pygame 2's `draw.polygon`, `draw.lines` and
//! `draw.circle` fill for the same integer arguments. Integer arithmetic throughout, as
//! pygame's; pixel `(x, y)` is column `x`, row `y`, and the canvas clips.
//!
//! The rules are the textbook algorithms pygame 2 uses (a scanline fill, Bresenham's
//! line, the midpoint circle), written here from what pygame draws, with pygame's
//! source consulted for the disc's exact span rule; each is checked pixel for pixel
//! against pygame 2.6 itself (the tests' reference shapes, and
//! `robots/tests/gym_pusht_parity.rs` against whole gym-pusht frames).

/// A `side x side` RGB canvas, rows top first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    side: i64,
    rgb: Vec<u8>,
}

impl Canvas {
    /// A canvas painted `colour` all over.
    pub fn filled(side: usize, colour: [u8; 3]) -> Self {
        Self {
            side: side as i64,
            rgb: colour.repeat(side * side),
        }
    }

    /// Side in pixels.
    pub fn side(&self) -> usize {
        self.side as usize
    }

    /// The colour at column `x`, row `y` (both below `side`).
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.side() + x) * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// Row `y`, three bytes a pixel.
    pub fn row(&self, y: usize) -> &[u8] {
        let width = self.side() * 3;
        &self.rgb[y * width..(y + 1) * width]
    }

    /// Paints row `y` from column `x0` to `x1`, both included, clipped to the canvas.
    fn span(&mut self, y: i64, x0: i64, x1: i64, colour: [u8; 3]) {
        let (x0, x1) = (x0.min(x1).max(0), x0.max(x1).min(self.side - 1));
        if !(0..self.side).contains(&y) || x0 > x1 {
            return;
        }
        let start = ((y * self.side + x0) * 3) as usize;
        let end = ((y * self.side + x1 + 1) * 3) as usize;
        for pixel in self.rgb[start..end].chunks_exact_mut(3) {
            pixel.copy_from_slice(&colour);
        }
    }

    /// Paints column `x` from row `y0` to `y1`, both included, clipped to the canvas.
    fn column(&mut self, x: i64, y0: i64, y1: i64, colour: [u8; 3]) {
        for y in y0.min(y1)..=y0.max(y1) {
            self.span(y, x, x, colour);
        }
    }

    /// Fills a polygon with integer corners as pygame's `draw.polygon(width=0)` does:
    /// scanlines from the top corner's row to the bottom one's, each edge crossing a
    /// row at `x1 + floor((y - y1)(x2 - x1) / (y2 - y1))`, the pixels from each
    /// crossing to the next included; horizontal edges strictly between the top and
    /// bottom rows painted whole.
    pub fn fill_polygon(&mut self, corners: &[[i64; 2]], colour: [u8; 3]) {
        let Some(top) = corners.iter().map(|c| c[1]).min() else {
            return;
        };
        let bottom = corners.iter().map(|c| c[1]).max().unwrap_or(top);
        if top == bottom {
            let left = corners.iter().map(|c| c[0]).min().unwrap_or(0);
            let right = corners.iter().map(|c| c[0]).max().unwrap_or(0);
            self.span(top, left, right, colour);
            return;
        }
        let edges = || {
            (0..corners.len()).map(|i| {
                let previous = corners[(i + corners.len() - 1) % corners.len()];
                (previous, corners[i])
            })
        };
        let mut crossings = Vec::with_capacity(corners.len());
        for y in top..=bottom {
            crossings.clear();
            for (a, b) in edges() {
                let ([x1, y1], [x2, y2]) = if a[1] < b[1] { (a, b) } else { (b, a) };
                if y1 == y2 {
                    continue;
                }
                if (y1..y2).contains(&y) || (y == bottom && y2 == bottom && y > y1) {
                    crossings.push(x1 + ((y - y1) * (x2 - x1)).div_euclid(y2 - y1));
                }
            }
            crossings.sort_unstable();
            for pair in crossings.chunks_exact(2) {
                self.span(y, pair[0], pair[1], colour);
            }
        }
        for (a, b) in edges() {
            if a[1] == b[1] && top < b[1] && b[1] < bottom {
                self.span(b[1], a[0], b[0], colour);
            }
        }
    }

    /// A line `width` pixels thick as pygame's `draw.line`/`draw.lines` draw it:
    /// Bresenham's line from `a` to `b`, each of its pixels widened across the line's
    /// minor axis (horizontally for a line at least as tall as it is wide), from
    /// `width / 2` before it (one fewer for an even width) to `width / 2` after.
    pub fn thick_line(&mut self, a: [i64; 2], b: [i64; 2], width: i64, colour: [u8; 3]) {
        let half = width / 2;
        let before = half - (1 - width % 2);
        let widen_x = (a[0] - b[0]).abs() <= (a[1] - b[1]).abs();
        let (dx, dy) = ((b[0] - a[0]).abs(), (b[1] - a[1]).abs());
        let (sx, sy) = (
            if a[0] < b[0] { 1 } else { -1 },
            if a[1] < b[1] { 1 } else { -1 },
        );
        let mut err = (if dx > dy { dx } else { -dy }) / 2;
        let [mut x, mut y] = a;
        loop {
            if widen_x {
                self.span(y, x - before, x + half, colour);
            } else {
                self.column(x, y - before, y + half, colour);
            }
            if [x, y] == b {
                break;
            }
            let e2 = err;
            if e2 > -dx {
                err -= dy;
                x += sx;
            }
            if e2 < dy {
                err += dx;
                y += sy;
            }
        }
    }

    /// A filled circle as pygame's `draw.circle(width=0)` draws it (its midpoint
    /// algorithm: the disc covers columns `cx - r` to `cx + r - 1`, and rows likewise).
    pub fn fill_circle(&mut self, centre: [i64; 2], radius: i64, colour: [u8; 3]) {
        let [cx, cy] = centre;
        let (mut f, mut ddf_x, mut ddf_y) = (1 - radius, 0, -2 * radius);
        let (mut x, mut y) = (0, radius);
        while x < y {
            if f >= 0 {
                y -= 1;
                ddf_y += 2;
                f += ddf_y;
            }
            x += 1;
            ddf_x += 2;
            f += ddf_x + 1;
            if f >= 0 {
                self.span(cy + y - 1, cx - x, cx + x - 1, colour);
                self.span(cy - y, cx - x, cx + x - 1, colour);
            }
            self.span(cy + x - 1, cx - y, cx + y - 1, colour);
            self.span(cy - x, cx - y, cx + y - 1, colour);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: [u8; 3] = [255, 255, 255];

    /// The painted pixels, as `(x, y)` pairs in row order.
    fn painted(canvas: &Canvas) -> Vec<(usize, usize)> {
        let side = canvas.side();
        (0..side * side)
            .map(|i| (i % side, i / side))
            .filter(|&(x, y)| canvas.pixel(x, y) == ON)
            .collect()
    }

    /// Per row, the first and last painted column: `(y, x0, x1)`.
    fn rows(canvas: &Canvas) -> Vec<(usize, usize, usize)> {
        let mut rows: Vec<(usize, usize, usize)> = Vec::new();
        for (x, y) in painted(canvas) {
            match rows.last_mut() {
                Some(row) if row.0 == y => row.2 = x,
                _ => rows.push((y, x, x)),
            }
        }
        rows
    }

    #[test]
    fn a_circle_of_radius_two_is_pygames_twelve_pixels() {
        // pygame.draw.circle(s, c, (5, 5), 2): rows 3..=6, columns 3..=6 less the corners.
        let mut canvas = Canvas::filled(12, [0, 0, 0]);
        canvas.fill_circle([5, 5], 2, ON);
        assert_eq!(
            rows(&canvas),
            vec![(3, 4, 5), (4, 3, 6), (5, 3, 6), (6, 4, 5)]
        );
        assert_eq!(painted(&canvas).len(), 12);
    }

    #[test]
    fn discs_have_pygames_pixel_counts() {
        // pygame 2.6: radius 11 fills 368 pixels, radius 15 fills 688 (not pi r^2).
        for (radius, count) in [(11, 368), (15, 688)] {
            let mut canvas = Canvas::filled(40, [0, 0, 0]);
            canvas.fill_circle([20, 20], radius, ON);
            let pixels = painted(&canvas);
            assert_eq!(pixels.len(), count, "radius {radius}");
            let xs = pixels.iter().map(|p| p.0);
            assert_eq!(
                (xs.clone().min(), xs.max()),
                (Some(20 - radius as usize), Some(19 + radius as usize))
            );
        }
    }

    #[test]
    fn polygon_edges_round_down_on_both_sides() {
        // pygame.draw.polygon(s, c, [(6, 0), (0, 4), (6, 8)]): the left edges cross
        // each row at x = 6 + floor(-6 (y - y1) / 4) (floor, not C's truncation).
        let mut canvas = Canvas::filled(10, [0, 0, 0]);
        canvas.fill_polygon(&[[6, 0], [0, 4], [6, 8]], ON);
        assert_eq!(
            rows(&canvas),
            vec![
                (0, 6, 6),
                (1, 4, 6),
                (2, 3, 6),
                (3, 1, 6),
                (4, 0, 6),
                (5, 1, 6),
                (6, 3, 6),
                (7, 4, 6),
                (8, 6, 6),
            ]
        );
    }

    #[test]
    fn an_axis_aligned_rectangle_includes_its_edges() {
        let mut canvas = Canvas::filled(10, [0, 0, 0]);
        canvas.fill_polygon(&[[2, 1], [7, 1], [7, 4], [2, 4]], ON);
        assert_eq!(painted(&canvas).len(), 6 * 4);
        assert_eq!(rows(&canvas)[0], (1, 2, 7));
    }

    #[test]
    fn a_four_pixel_line_spans_one_before_and_two_after() {
        // pygame.draw.line(s, c, (2, 5), (9, 7), 4): wider than tall, so widened
        // vertically, rows y - 1 ..= y + 2 around Bresenham's pixel.
        let mut canvas = Canvas::filled(12, [0, 0, 0]);
        canvas.thick_line([2, 5], [9, 7], 4, ON);
        let column =
            |x: usize| -> Vec<usize> { (0..12).filter(|&y| canvas.pixel(x, y) == ON).collect() };
        assert_eq!(column(2), vec![4, 5, 6, 7]);
        assert_eq!(column(9), vec![6, 7, 8, 9]);
        assert!(column(1).is_empty() && column(10).is_empty());
        // A steep line is widened across x.
        let mut canvas = Canvas::filled(12, [0, 0, 0]);
        canvas.thick_line([5, 1], [5, 9], 4, ON);
        assert_eq!(
            rows(&canvas),
            (1..=9).map(|y| (y, 4, 7)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn drawing_clips_at_the_canvas_edge() {
        let mut canvas = Canvas::filled(8, [0, 0, 0]);
        canvas.fill_circle([0, 0], 3, ON);
        canvas.thick_line([-4, 7], [12, 7], 4, ON);
        canvas.fill_polygon(&[[6, -3], [20, -3], [20, 2], [6, 2]], ON);
        assert_eq!(canvas.pixel(0, 0), ON);
        assert_eq!(canvas.pixel(7, 7), ON);
        assert_eq!(canvas.pixel(7, 2), ON);
        assert_eq!(canvas.pixel(4, 4), [0, 0, 0]);
    }
}
