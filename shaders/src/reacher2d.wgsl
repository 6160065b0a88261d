// reacher2d's top-down camera for a batch of scenes in one dispatch: one invocation
// per pixel per scene, the same per-pixel rule as the CPU reference renderer
// (robots/src/reacher2d/render.rs). Colours and radii are substituted from the Rust
// constants when the module is built (the @NAME@ placeholders).

struct Params {
    size: u32,
    count: u32,
    half_extent: f32,
    pixel: f32,
}

// Points in metres: the elbow, the end effector and the three targets; the targets'
// radius; padding to 16 bytes.
struct Scene {
    elbow: vec2<f32>,
    end_effector: vec2<f32>,
    red: vec2<f32>,
    green: vec2<f32>,
    blue: vec2<f32>,
    target_radius: f32,
    pad: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> scenes: array<Scene>;
@group(0) @binding(2) var<storage, read_write> pixels: array<u32>;

fn segment_distance(p: vec2<f32>, a: vec2<f32>, b: vec2<f32>) -> f32 {
    let ab = b - a;
    let len2 = dot(ab, ab);
    var t = 0.0;
    if (len2 > 0.0) {
        t = clamp(dot(p - a, ab) / len2, 0.0, 1.0);
    }
    return length(p - (a + ab * t));
}

fn pack(rgb: vec3<u32>) -> u32 {
    return rgb.x | (rgb.y << 8u) | (rgb.z << 16u);
}

@compute @workgroup_size(8, 8, 1)
fn render(@builtin(global_invocation_id) id: vec3<u32>) {
    let px = id.x;
    let py = id.y;
    let index = id.z;
    if (px >= params.size || py >= params.size || index >= params.count) {
        return;
    }
    let scene = scenes[index];
    let h = params.half_extent;
    let p = vec2<f32>(
        -h + (f32(px) + 0.5) * params.pixel,
        h - (f32(py) + 0.5) * params.pixel,
    );
    var colour = vec3<u32>(@BACKGROUND@);
    if (segment_distance(p, vec2<f32>(0.0, 0.0), scene.elbow) <= @LINK_HALF_WIDTH@) {
        colour = vec3<u32>(@UPPER_LINK@);
    }
    if (segment_distance(p, scene.elbow, scene.end_effector) <= @LINK_HALF_WIDTH@) {
        colour = vec3<u32>(@LOWER_LINK@);
    }
    if (length(p) <= @BASE_RADIUS@) {
        colour = vec3<u32>(@BASE@);
    }
    if (length(p - scene.end_effector) <= @END_EFFECTOR_RADIUS@) {
        colour = vec3<u32>(@END_EFFECTOR@);
    }
    if (length(p - scene.red) <= scene.target_radius) {
        colour = vec3<u32>(@RED@);
    }
    if (length(p - scene.green) <= scene.target_radius) {
        colour = vec3<u32>(@GREEN@);
    }
    if (length(p - scene.blue) <= scene.target_radius) {
        colour = vec3<u32>(@BLUE@);
    }
    pixels[(index * params.size + py) * params.size + px] = pack(colour);
}
