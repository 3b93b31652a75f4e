//! What one allocation sample stands for, and how its fractional weights become integer counts.
//!
//! The JVM's sampler picks the next sampling point of a thread at an exponentially distributed distance
//! (mean: the interval `i`) in the bytes the thread allocates, and samples the object that covers it: a
//! Poisson process over bytes. An object of `s` bytes covers at least one point with probability
//! p = 1 - e^(-s/i), so a sample of it stands for 1/p objects and s/p bytes, and the sums of these over
//! the samples are unbiased estimates of the objects and bytes allocated (each object is counted 1/p
//! times with probability p).

/// (objects, bytes) one sample of an object of `size` bytes stands for, at mean interval `interval`.
pub fn weights(size: u64, interval: u64) -> (f64, f64) {
    if size == 0 || interval == 0 {
        return (0.0, 0.0);
    }
    // 1 - e^(-x) as -expm1(-x): exact for the small x of small objects (16 bytes at 512 KiB: x = 3e-5).
    let p = -(-(size as f64) / interval as f64).exp_m1();
    (1.0 / p, size as f64 / p)
}

/// A small per-thread random number generator (xorshift64*): rounding needs uniform numbers, not strong ones.
#[derive(Clone, Copy, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value; 0 is replaced).
    pub fn new(seed: u64) -> Rng {
        // splitmix64's finaliser spreads nearby seeds (thread ids) apart.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `x` rounded down or up at random, up with probability equal to its fractional part: the expected
/// result is `x` itself, so counts made of such roundings stay unbiased context by context (a sample of
/// a 512 KiB object at 512k stands for 1.58 objects: counted as 1 or 2, 2 in 58 % of cases).
pub fn round_random(x: f64, rng: &mut Rng) -> u64 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let whole = x.floor();
    whole as u64 + u64::from(rng.uniform() < x - whole)
}

/// Fixed point with 16 fractional bits, for totals kept in atomics.
pub const FIXED_ONE: f64 = 65536.0;

/// `[B` → `byte[]`, `Ljava/lang/String;` → `java.lang.String`, `[[Ljava/lang/Object;` →
/// `java.lang.Object[][]`: a class signature as Java source names the type.
pub fn java_type_name(signature: &str) -> String {
    let dims = signature.bytes().take_while(|&b| b == b'[').count();
    let element = &signature[dims..];
    let mut name = match element {
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "D" => "double".to_string(),
        "F" => "float".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "S" => "short".to_string(),
        "Z" => "boolean".to_string(),
        _ => match element.strip_prefix('L') {
            Some(class) => class.strip_suffix(';').unwrap_or(class).replace('/', "."),
            None => element.to_string(),
        },
    };
    name.push_str(&"[]".repeat(dims));
    name
}

/// An interval in bytes as `alloc=` spells it: `512k`, `1m`, `1g`, `1000`.
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in [("g", 1u64 << 30), ("m", 1 << 20), ("k", 1 << 10)] {
        if bytes >= scale && bytes % scale == 0 {
            return format!("{}{unit}", bytes / scale);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_sampling_probability() {
        let i = 512 * 1024;
        // Small objects: p ≈ s/i, so a sample stands for about i bytes.
        let (n, b) = weights(16, i);
        assert!((n - i as f64 / 16.0).abs() / n < 1e-4, "{n}");
        assert!((b - i as f64).abs() / b < 1e-4, "{b}");
        // An object of the interval's size: p = 1 - 1/e.
        let (n, b) = weights(i, i);
        let p = 1.0 - (-1.0f64).exp();
        assert!((n - 1.0 / p).abs() < 1e-12 && (b - i as f64 / p).abs() < 1e-6);
        // Far larger: always sampled, stands for itself.
        assert_eq!(weights(64 * i, i), (1.0, (64 * i) as f64));
        assert_eq!(weights(0, i), (0.0, 0.0));
    }

    /// Simulates the sampler (exponential gaps over a stream of objects of mixed sizes) and checks that
    /// the estimates recover what was allocated: the weights are unbiased, with or without the rounding.
    #[test]
    fn estimates_of_a_simulated_sampler_recover_the_allocated_bytes_and_objects() {
        let interval = 4096u64;
        let sizes = [16u64, 24, 48, 512, 3000, 4096, 10_000, 70_000];
        let mut rng = Rng::new(7);
        let mut round_rng = Rng::new(8);
        let (mut bytes, mut objects) = (vec![0u64; sizes.len()], vec![0u64; sizes.len()]);
        let (mut est_b, mut est_n) = (vec![0f64; sizes.len()], vec![0f64; sizes.len()]);
        let (mut int_b, mut int_n) = (vec![0u64; sizes.len()], vec![0u64; sizes.len()]);
        let mut until = -(1.0 - rng.uniform()).ln() * interval as f64;
        for k in 0..2_000_000usize {
            let kind = k % sizes.len();
            let s = sizes[kind];
            bytes[kind] += s;
            objects[kind] += 1;
            let mut left = s as f64;
            let mut sampled = false;
            while left >= until {
                left -= until;
                until = -(1.0 - rng.uniform()).ln() * interval as f64;
                sampled = true;
            }
            until -= left;
            if sampled {
                let (n, b) = weights(s, interval);
                est_n[kind] += n;
                est_b[kind] += b;
                int_n[kind] += round_random(n, &mut round_rng);
                int_b[kind] += round_random(b, &mut round_rng);
            }
        }
        for kind in 0..sizes.len() {
            // Each object is counted 1/p times with probability p: an estimate's variance is the sum over
            // the objects of (1-p)/p times the square of what it counts (its size, or one).
            let s = sizes[kind] as f64;
            let p = -(-s / interval as f64).exp_m1();
            let spread = ((1.0 - p) / p * objects[kind] as f64).sqrt();
            for (est, int, truth, sigma) in [
                (est_b[kind], int_b[kind] as f64, bytes[kind] as f64, spread * s),
                (est_n[kind], int_n[kind] as f64, objects[kind] as f64, spread),
            ] {
                assert!(
                    (est - truth).abs() <= 5.0 * sigma + 1e-6 * truth,
                    "size {}: estimate {est:.0} for {truth:.0} (sigma {sigma:.0})",
                    sizes[kind]
                );
                assert!((int - est).abs() / truth < 0.01, "size {}: rounded {int} for {est:.0}", sizes[kind]);
            }
        }
    }

    #[test]
    fn random_rounding_keeps_the_mean() {
        let mut rng = Rng::new(1);
        let n = 200_000;
        let sum: u64 = (0..n).map(|_| round_random(1.582, &mut rng)).sum();
        assert!((sum as f64 / n as f64 - 1.582).abs() < 0.005, "{}", sum as f64 / n as f64);
        assert_eq!(round_random(3.0, &mut rng), 3);
        assert_eq!(round_random(0.0, &mut rng), 0);
        assert_eq!(round_random(f64::NAN, &mut rng), 0);
    }

    #[test]
    fn signatures_become_java_type_names() {
        assert_eq!(java_type_name("[B"), "byte[]");
        assert_eq!(java_type_name("Ljava/lang/String;"), "java.lang.String");
        assert_eq!(java_type_name("[[Ljava/lang/Object;"), "java.lang.Object[][]");
        assert_eq!(java_type_name("[J"), "long[]");
        assert_eq!(java_type_name("Lkprof/harness/AllocSplit$Small;"), "kprof.harness.AllocSplit$Small");
    }

    #[test]
    fn sizes_are_spelled_as_the_option_takes_them() {
        assert_eq!(format_size(512 * 1024), "512k");
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_size(1 << 30), "1g");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(1), "1");
    }
}
