//! One small seeded pseudo-random generator for the whole project: SplitMix64 (Steele, Lea &
//! Flood 2014). Deterministic and dependency-free, so property tests, synthetic benchmark
//! graphs and forgetting's masking order replay exactly from a seed. Not cryptographic.

/// SplitMix64: a 64-bit state advanced by a fixed odd increment, each output the state run
/// through a bijective mixer. Every seed (0 included) gives a full-period sequence.
///
/// ```
/// use soul_mem_core::rng::SplitMix64;
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The golden-ratio increment (2^64 / φ, odd).
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator whose first output is `mix(seed + GAMMA)`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits. Complexity: O(1).
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1): the centre of a 2^-53 cell, never 0 or 1, for logarithms and powers.
    pub fn next_f64_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// An index in `0..n` (`0` when `n` is 0), by modulo: the bias, at most n / 2^64, does not
    /// matter for tests and synthetic data.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of the reference implementation (Vigna's splitmix64.c) for seed 0.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn floats_and_indices_stay_in_range() {
        let mut r = SplitMix64::new(42);
        for _ in 0..1000 {
            let (x, y) = (r.next_f64(), r.next_f64_open());
            assert!((0.0..1.0).contains(&x) && y > 0.0 && y < 1.0);
            assert!(r.below(7) < 7);
        }
        assert_eq!(r.below(0), 0);
    }
}
