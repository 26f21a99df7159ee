//! A cost against load (a proxy's millicores or MiB against the RPS it carried) as an answer
//! only where one is defined. Through two points any line passes, with r² 1, so a slope and
//! its r² need [`MIN_LOADS`] loads or more; and a cost neither shrinks as load grows nor starts
//! below zero, so the line is fitted with both coefficients held at zero or above
//! (`stats::nonnegative_fit`): one that would fall is [`Trend::Flat`], one that would start
//! below zero goes through the origin. No negative slope or intercept is ever a figure.

use meshbench_stats::{nonnegative_fit, Line};

/// The fewest loads a line (a slope and its r²) is fitted over.
pub const MIN_LOADS: usize = 3;

/// What a cost does as load grows, over the loads measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trend {
    /// Fewer loads measured than a line needs.
    NotEnoughLoads { loads: usize },
    /// It does not grow with load: the best line with a slope of zero or more is flat, at
    /// `level` (the mean of the loads).
    Flat { level: f64, loads: usize },
    /// It grows: `intercept` (0 or more; exactly 0 when the free line started below zero) +
    /// `slope` x RPS, `slope` above 0.
    Rising(Line),
}

impl Trend {
    /// The trend of `(rps, cost)` points measured at `loads` distinct loads (repeats and
    /// allotments of one load are several points of one load). Non-finite points (a figure
    /// not measured) are left out, and so are the loads they leave without a point: the
    /// caller counts loads over the finite points.
    pub fn of(points: &[(f64, f64)], loads: usize) -> Trend {
        if loads < MIN_LOADS {
            return Trend::NotEnoughLoads { loads };
        }
        match nonnegative_fit(points) {
            None => Trend::NotEnoughLoads { loads },
            Some(line) if line.slope > 0.0 => Trend::Rising(line),
            Some(line) => Trend::Flat {
                level: line.intercept,
                loads,
            },
        }
    }

    /// The rising line, if it rises.
    pub fn line(&self) -> Option<Line> {
        match self {
            Trend::Rising(l) => Some(*l),
            _ => None,
        }
    }

    /// The loads it is measured over.
    pub fn loads(&self) -> usize {
        match self {
            Trend::NotEnoughLoads { loads } | Trend::Flat { loads, .. } => *loads,
            Trend::Rising(l) => l.n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_needs_three_loads_and_never_falls() {
        let two = [(300.0, 40.0), (600.0, 53.0)];
        assert_eq!(Trend::of(&two, 2), Trend::NotEnoughLoads { loads: 2 });
        let rising = [(300.0, 40.0), (600.0, 53.0), (1200.0, 80.0)];
        let Trend::Rising(l) = Trend::of(&rising, 3) else {
            panic!("{:?}", Trend::of(&rising, 3))
        };
        assert!(l.slope > 0.0 && l.intercept > 0.0 && l.r2 < 1.0, "{l:?}");
        let falling = [(300.0, 9.3), (600.0, 9.1), (1200.0, 8.8)];
        assert!(matches!(
            Trend::of(&falling, 3),
            Trend::Flat { level, loads: 3 } if (level - 9.0666).abs() < 1e-3
        ));
        // Repeats of two loads are still two loads.
        let repeats = [(300.0, 40.0), (301.0, 41.0), (600.0, 53.0), (602.0, 52.0)];
        assert_eq!(Trend::of(&repeats, 2), Trend::NotEnoughLoads { loads: 2 });
    }
}
