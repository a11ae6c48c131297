//! Which configurations to try.
//!
//! - **Exhaustive** when every valid configuration fits the budget.
//! - **Evolutionary** otherwise (the default): a first generation drawn at
//!   random (a quarter of the budget, at least 8), then generations of an
//!   eighth of the budget (at least 4) bred from
//!   the fastest so far — children of two parents (each value from one of
//!   them) or of one (one value moved to a neighbouring candidate, now and
//!   then to any candidate), with a
//!   fifth of each generation drawn fresh so the search does not settle on
//!   one corner of the space. Parents are chosen by two-way tournament, so
//!   faster ones breed more often. Children that break a constraint or were
//!   tried before are not counted against the budget.
//! - **Sample**: the whole budget drawn uniformly at random in one
//!   generation (for offline plans, which are measured in one go).
//!
//! Every draw comes from one generator seeded by `--seed`; the compile and
//! measure order never feeds back into it, so a search repeats exactly for
//! a seed given the same timings.

use rocmc_ir::reference::Rng;
use rocmc_ir::tune::{Config, TuneSpace};
use std::collections::HashSet;

/// How the candidates are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every valid configuration.
    Exhaustive,
    /// One uniform sample of the budget.
    Sample,
    /// Generations bred from the fastest so far.
    Evolve,
}

impl Strategy {
    /// For people.
    pub fn describe(self) -> &'static str {
        match self {
            Strategy::Exhaustive => "exhaustive",
            Strategy::Sample => "random sample",
            Strategy::Evolve => "evolutionary",
        }
    }
}

/// Enumerating beyond this many configurations is pointless for a budgeted search.
const ENUMERATE: u128 = 1 << 20;

/// The valid configurations' indices in the space's enumeration order.
pub fn valid(space: &TuneSpace) -> Vec<u64> {
    let n = space.size().min(ENUMERATE) as u64;
    (0..n)
        .filter(|&i| {
            space
                .nth(u128::from(i))
                .is_some_and(|c| space.broken(&c).is_none())
        })
        .collect()
}

/// The search's state: the space, what was tried, the generator.
pub struct Search<'s> {
    space: &'s TuneSpace,
    valid: Vec<u64>,
    /// How candidates are chosen.
    pub strategy: Strategy,
    budget: usize,
    seen: HashSet<Config>,
    rng: Rng,
}

impl<'s> Search<'s> {
    /// A search of at most `budget` candidates; `evolve` allows the
    /// evolutionary strategy when the space exceeds the budget.
    pub fn new(space: &'s TuneSpace, budget: usize, seed: u64, evolve: bool) -> Search<'s> {
        let valid = valid(space);
        let budget = budget.max(1);
        let strategy = if valid.len() <= budget {
            Strategy::Exhaustive
        } else if evolve {
            Strategy::Evolve
        } else {
            Strategy::Sample
        };
        Search {
            space,
            valid,
            strategy,
            budget,
            seen: HashSet::new(),
            rng: Rng(seed ^ 0x7475_6e65),
        }
    }

    /// Configurations meeting the constraints (counted up to 2^20).
    pub fn valid_count(&self) -> usize {
        self.valid.len()
    }

    /// The first generation: the defaults and a uniform sample.
    pub fn first(&mut self) -> Vec<Config> {
        let n = match self.strategy {
            Strategy::Exhaustive => self.valid.len(),
            Strategy::Sample => self.budget,
            Strategy::Evolve => (self.budget / 4).max(8).min(self.budget),
        };
        let mut picked: Vec<Config> = if n >= self.valid.len() {
            self.valid
                .iter()
                .filter_map(|&i| self.space.nth(u128::from(i)))
                .collect()
        } else {
            let mut idx = self.valid.clone();
            // A partial Fisher-Yates shuffle: the first `n` are a uniform sample.
            for i in 0..n {
                let j = i + self.rng.below(idx.len() - i);
                idx.swap(i, j);
            }
            idx[..n]
                .iter()
                .filter_map(|&i| self.space.nth(u128::from(i)))
                .collect()
        };
        // The defaults always run, so tuning never records something slower
        // than the untuned build.
        let def = self.space.default_config();
        if !picked.contains(&def) {
            if picked.len() >= n.max(1) {
                picked.pop();
            }
            picked.insert(0, def);
        }
        self.seen.extend(picked.iter().cloned());
        picked
    }

    /// The next generation, bred from `ranked` (timed candidates, fastest
    /// first); empty when the budget is spent or nothing new can be found.
    pub fn next(&mut self, ranked: &[(Config, f64)]) -> Vec<Config> {
        if self.strategy != Strategy::Evolve || ranked.is_empty() {
            return Vec::new();
        }
        let left = self.budget.saturating_sub(self.seen.len());
        let n = left.min((self.budget / 8).max(4));
        let parents = &ranked[..(ranked.len() / 4).clamp(2.min(ranked.len()), ranked.len())];
        let mut out: Vec<Config> = Vec::new();
        let mut tries = 0;
        while out.len() < n && tries < n * 200 {
            tries += 1;
            let r = self.rng.unit();
            let child = if r < 0.2 {
                let i = self.valid[self.rng.below(self.valid.len())];
                match self.space.nth(u128::from(i)) {
                    Some(c) => c,
                    None => continue,
                }
            } else if r < 0.55 && parents.len() >= 2 {
                let a = &parents[self.tournament(parents.len())].0;
                let b = &parents[self.tournament(parents.len())].0;
                let mut c: Config = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| {
                        if self.rng.unit() < 0.5 {
                            x.clone()
                        } else {
                            y.clone()
                        }
                    })
                    .collect();
                if self.rng.unit() < 0.3 {
                    self.mutate(&mut c);
                }
                c
            } else {
                let mut c = parents[self.tournament(parents.len())].0.clone();
                self.mutate(&mut c);
                c
            };
            if self.space.broken(&child).is_none() && self.seen.insert(child.clone()) {
                out.push(child);
            }
        }
        out
    }

    /// The better of two random ranks.
    fn tournament(&mut self, n: usize) -> usize {
        self.rng.below(n).min(self.rng.below(n))
    }

    /// Moves one value to a neighbouring candidate of its parameter.
    fn mutate(&mut self, c: &mut Config) {
        let open: Vec<usize> = (0..self.space.params.len())
            .filter(|&i| self.space.params[i].values.len() > 1)
            .collect();
        if open.is_empty() {
            return;
        }
        let p = &self.space.params[open[self.rng.below(open.len())]];
        let Some(slot) = c.iter_mut().find(|(n, _)| *n == p.name) else {
            return;
        };
        let at = p.values.iter().position(|&v| v == slot.1).unwrap_or(0);
        // Mostly a neighbour (fine steps near a good point), sometimes any value (long jumps).
        let to = if self.rng.unit() < 0.25 {
            self.rng.below(p.values.len())
        } else if at == 0 {
            1
        } else if at + 1 == p.values.len() || self.rng.unit() < 0.5 {
            at - 1
        } else {
            at + 1
        };
        slot.1 = p.values[to];
    }
}
