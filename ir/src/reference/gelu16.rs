//! The points and the exact values against which `f16(gelu(x))` of an f32
//! `x` is held to one f16 ulp: on the CPU by tests/run_data.rs, on the GPU
//! by `rocmc-gpu-check gelu16`. The exact value is the tanh GELU in f64,
//! rounded once to f16.

/// 2^16 points of [-12, 12] and the special values.
pub fn points() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..1 << 16)
        .map(|i| -12.0 + 24.0 * i as f32 / 65536.0)
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        30.0,
        -30.0,
        1e20,
        -1e20,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    xs
}

/// The tanh GELU of `x` (−0 at −∞), correctly rounded to f16: its bits.
pub fn exact(x: f32) -> u16 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let g = if x == f64::NEG_INFINITY {
        -0.0
    } else if x == f64::INFINITY {
        x
    } else {
        0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
    };
    half::f16::from_f64(g).to_bits()
}

/// How many f16 values lie between two f16 bit patterns (0: equal, or
/// +0 and −0; 1: neighbours).
pub fn ulps(a: u16, b: u16) -> i32 {
    // Ordered integers of the bit patterns: neighbours differ by one.
    let ord = |v: u16| {
        let v = i32::from(v);
        if v & 0x8000 != 0 {
            -(v & 0x7fff)
        } else {
            v
        }
    };
    (ord(a) - ord(b)).abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulps_count_f16_values_between_across_zero() {
        assert_eq!(ulps(0x3c00, 0x3c01), 1);
        assert_eq!(ulps(0x0000, 0x8000), 0);
        // The smallest denormals either side of zero are two apart.
        assert_eq!(ulps(0x0001, 0x8001), 2);
        assert_eq!(exact(f32::INFINITY), 0x7c00);
        assert_eq!(exact(f32::NEG_INFINITY), 0x8000);
        assert_eq!(
            exact(1.0),
            half::f16::from_f64(0.841_191_990_607_477_2).to_bits()
        );
    }
}
