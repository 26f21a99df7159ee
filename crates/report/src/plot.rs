//! Charts: a small description of a chart (series of points, an optional second y axis, a
//! threshold line, marked points, a shaded span) drawn with plotters to SVG (inline in the HTML
//! report, and as files) and to PNG. Axes are scaled to the data; latency is in milliseconds.
//! The legend is drawn in a strip of its own under the plot, never inside it: a legend box in
//! a corner of the plot hid the points that fell there. An x axis of categories (variants)
//! carries bars, side by side within each category, one bar series each, or stacked: the parts
//! of one whole (where a request's latency goes) piled up in one bar. A point (or a bar) from a
//! step the generator's self-check calls INVALID is ringed where it is drawn, and the legend
//! names the ring with the causes (`INVALID: cpu_contention`).

use std::path::Path;

use meshbench_analysis::invalid::Invalid;
use meshbench_results::Cause;
use plotters::chart::DualCoordChartContext;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Draw {
    Line,
    Points,
    LinePoints,
    Dashed,
    /// A bar from zero at each point of an axis of [`XAxis::Categories`]; the bar series of a
    /// chart stand side by side within each category.
    Bars,
    /// A segment of one bar per category: the stacked series of a chart pile up in their
    /// order (a part below zero is drawn as none), in one slot beside any other bars.
    Stacked,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub draw: Draw,
    /// Index into the palette, so that a variant keeps its colour across charts.
    pub color: usize,
}

/// How x values are labelled.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    Linear,
    /// x is log10(1 / (1 - q)): labelled as percentiles (90 %, 99 %, 99.9 %...).
    Spectrum,
    /// x is the index of a category (a variant), labelled with its name: a chart of bars.
    Categories(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File name without extension.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
    /// A second y axis on the right: its label and series.
    pub right: Option<(String, Vec<Series>)>,
    /// A horizontal line (y, label), such as an SLO.
    pub hline: Option<(f64, String)>,
    /// Marked points (x, y, label), such as a knee.
    pub marks: Vec<(f64, f64, String)>,
    /// A shaded x span and its label, such as the warm-up.
    pub shade: Option<(f64, f64, String)>,
    /// Points of the left axis' series taken from a step the generator's self-check calls
    /// INVALID, as (series, point) indices: each is ringed where it is drawn.
    pub invalid: Vec<(usize, usize)>,
    /// Their causes, each once: the legend names the ring with them.
    pub invalid_causes: Vec<Cause>,
    /// One sentence saying what the chart shows.
    pub sentence: String,
    pub size: (u32, u32),
}

impl Chart {
    pub fn new(id: &str, title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_axis: XAxis::Linear,
            series: Vec::new(),
            right: None,
            hline: None,
            marks: Vec::new(),
            shade: None,
            invalid: Vec::new(),
            invalid_causes: Vec::new(),
            sentence: String::new(),
            size: (760, 400),
        }
    }

    /// Adds `s` to the left axis, ringing each point whose verdict in `verdicts` (one per
    /// point, in order) is INVALID.
    pub fn push_judged(&mut self, s: Series, verdicts: &[Option<Invalid>]) {
        let series = self.series.len();
        for (point, verdict) in verdicts.iter().enumerate().take(s.points.len()) {
            if let Some(i) = verdict {
                self.invalid.push((series, point));
                for c in &i.causes {
                    if !self.invalid_causes.contains(c) {
                        self.invalid_causes.push(*c);
                    }
                }
            }
        }
        self.series.push(s);
    }

    /// What a ring means, as the legend says it: `INVALID: cpu_contention`; `None` when no
    /// point is ringed.
    pub fn ring_label(&self) -> Option<String> {
        (!self.invalid.is_empty()).then(|| Invalid::marks(&self.invalid_causes))
    }
}

/// The colour of the ring around a point from an INVALID step.
const RING: RGBColor = RGBColor(170, 0, 0);

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-9 {
        hi = lo + lo.abs().max(1.0);
    }
    let pad = (hi - lo) * 0.05;
    (if from_zero { lo } else { lo - pad }, hi + pad)
}

/// A percentile as the spectrum axis labels it.
fn spectrum_label(x: f64) -> String {
    let q = 1.0 - 10f64.powf(-x);
    let p = q * 100.0;
    if p < 99.0 {
        format!("{p:.0}%")
    } else {
        let digits = (x - 2.0).ceil().max(0.0) as usize;
        format!("{p:.digits$}%")
    }
}

fn number_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The name of the category at `x` (an index); none between categories.
fn category_label(names: &[String], x: f64) -> String {
    let at = x.round();
    if (x - at).abs() > 1e-6 || at < 0.0 {
        return String::new();
    }
    names.get(at as usize).cloned().unwrap_or_default()
}

/// Where bar `slot` of `slots` stands within the category at `x`: the category's middle 80 %,
/// shared equally.
fn bar_span(x: f64, slot: usize, slots: usize) -> (f64, f64) {
    let width = 0.8 / slots.max(1) as f64;
    let left = x - 0.4 + slot as f64 * width;
    (left, left + width)
}

/// The segments of a dashed line through `points` (drawn as short paths, so that both
/// backends draw it the same).
fn dashes(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        for k in (0..20).step_by(2) {
            let at = |t: f64| (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            out.push(vec![at(k as f64 / 20.0), at((k + 1) as f64 / 20.0)]);
        }
    }
    out
}

/// Draws one series with `$method` (draw_series or draw_secondary_series).
macro_rules! series {
    ($chart:expr, $method:ident, $s:expr) => {{
        let s: &Series = $s;
        let c = color(s.color);
        let style = c.stroke_width(2);
        if matches!(s.draw, Draw::Line | Draw::LinePoints) {
            $chart.$method(std::iter::once(PathElement::new(s.points.clone(), style)))?;
        }
        if matches!(s.draw, Draw::Points | Draw::LinePoints) {
            $chart.$method(s.points.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
        }
        if s.draw == Draw::Dashed {
            $chart.$method(
                dashes(&s.points)
                    .into_iter()
                    .map(|d| PathElement::new(d, style)),
            )?;
        }
    }};
}

/// One entry of the legend: how its series is drawn (or the ring around an INVALID point),
/// its colour and its name.
struct Entry {
    draw: Option<Draw>,
    color: RGBColor,
    name: String,
}

const LEGEND_ROW: i32 = 18;
const LEGEND_PAD: i32 = 6;
/// Left of the plot: the chart's margin plus its y label area, where the legend starts.
const PLOT_LEFT: i32 = 12 + 62;

/// The legend's entries laid out in rows.
struct LegendLayout {
    /// Each entry's top-left corner inside the box's padding.
    at: Vec<(i32, i32)>,
    /// The box around them all: width, height.
    size: (i32, i32),
}

/// Entries `widths` wide laid out in rows within a chart `width` wide; `None` without entries.
fn legend_layout(widths: &[i32], width: i32) -> Option<LegendLayout> {
    if widths.is_empty() {
        return None;
    }
    let room = (width - PLOT_LEFT - 12 - 2 * LEGEND_PAD).max(1);
    let (mut x, mut y, mut widest) = (0, 0, 0);
    let mut at = Vec::with_capacity(widths.len());
    for &w in widths {
        if x > 0 && x + w > room {
            x = 0;
            y += LEGEND_ROW;
        }
        at.push((x, y));
        x += w;
        widest = widest.max(x);
    }
    Some(LegendLayout {
        at,
        size: (widest + 2 * LEGEND_PAD, y + LEGEND_ROW + 2 * LEGEND_PAD),
    })
}

/// Draws the legend into `area` (a strip under the plot), left-aligned with the plot.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    layout: &LegendLayout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, h) = layout.size;
    let (x0, y0) = (PLOT_LEFT, 2);
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        WHITE.filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        RGBColor(190, 190, 190),
    ))?;
    for (e, (x, y)) in entries.iter().zip(&layout.at) {
        let (x, y) = (x0 + LEGEND_PAD + x, y0 + LEGEND_PAD + y + LEGEND_ROW / 2);
        let style = e.color.stroke_width(2);
        match e.draw {
            Some(Draw::Line | Draw::LinePoints) => {
                area.draw(&PathElement::new(vec![(x, y), (x + 20, y)], style))?
            }
            Some(Draw::Dashed) => {
                for k in [0, 8, 16] {
                    area.draw(&PathElement::new(vec![(x + k, y), (x + k + 4, y)], style))?;
                }
            }
            Some(Draw::Points) => {}
            Some(Draw::Bars | Draw::Stacked) => area.draw(&Rectangle::new(
                [(x + 4, y - 6), (x + 16, y + 6)],
                e.color.filled(),
            ))?,
            None => area.draw(&Circle::new((x + 10, y), RING_RADIUS, style))?,
        }
        if matches!(e.draw, Some(Draw::Points | Draw::LinePoints)) {
            area.draw(&Circle::new((x + 10, y), 4, e.color.filled()))?;
        }
        area.draw(&Text::new(
            e.name.clone(),
            (x + 26, y - 7),
            ("sans-serif", 12).into_font(),
        ))?;
    }
    Ok(())
}

/// The stacked series' segments (x, base, top, colour), piled up per category in series
/// order; a negative value adds nothing.
fn stack(c: &Chart) -> Vec<(f64, f64, f64, usize)> {
    let mut tops: Vec<(f64, f64)> = Vec::new();
    let mut segments = Vec::new();
    for s in c.series.iter().filter(|s| s.draw == Draw::Stacked) {
        for &(x, y) in &s.points {
            let base = match tops.iter_mut().find(|(at, _)| *at == x) {
                Some((_, top)) => top,
                None => {
                    tops.push((x, 0.0));
                    &mut tops.last_mut().expect("just pushed").1
                }
            };
            let from = *base;
            *base += y.max(0.0);
            segments.push((x, from, *base, s.color));
        }
    }
    segments
}

/// The legend's entries: every series (left axis, then right), then the threshold line's, then
/// the ring's.
fn legend_entries(c: &Chart) -> Vec<Entry> {
    let mut entries: Vec<Entry> = c
        .series
        .iter()
        .chain(c.right.iter().flat_map(|r| r.1.iter()))
        .map(|s| Entry {
            draw: Some(s.draw),
            color: color(s.color),
            name: s.name.clone(),
        })
        .collect();
    if let Some((_, label)) = &c.hline {
        entries.push(Entry {
            draw: Some(Draw::Line),
            color: RGBColor(200, 0, 0),
            name: label.clone(),
        });
    }
    if let Some(label) = c.ring_label() {
        entries.push(Entry {
            draw: None,
            color: RING,
            name: label,
        });
    }
    entries
}

/// The x axis' span: the categories', else every point's and the shaded span's.
fn x_range(c: &Chart) -> (f64, f64) {
    let all_x = c
        .series
        .iter()
        .chain(c.right.iter().flat_map(|r| r.1.iter()))
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.shade.iter().flat_map(|s| [s.0, s.1]));
    match &c.x_axis {
        XAxis::Categories(names) => (-0.5, names.len().max(1) as f64 - 0.5),
        XAxis::Linear | XAxis::Spectrum => range(all_x, false),
    }
}

/// The left y axis' span: every point on it, the stacks' tops, the threshold and the marks.
fn y_range(c: &Chart, stacked: &[(f64, f64, f64, usize)]) -> (f64, f64) {
    let ys = c
        .series
        .iter()
        .filter(|s| s.draw != Draw::Stacked)
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(stacked.iter().map(|seg| seg.2))
        .chain(c.hline.iter().map(|h| h.0))
        .chain(c.marks.iter().map(|m| m.1));
    range(ys, true)
}

/// The plot's coordinates: x and the left y axis, both linear.
type Plane<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The plot's two coordinate systems: x with the left y axis, and x with the right one.
type DualPlane<'a, DB> = DualCoordChartContext<
    'a,
    DB,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

/// The shaded span of `c` (if any) with its label, over the y span `(y0, y1)`.
fn draw_shade<DB: DrawingBackend>(
    chart: &mut Plane<'_, DB>,
    c: &Chart,
    (y0, y1): (f64, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if let Some((a, b, label)) = &c.shade {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(*a, y0), (*b, y1)],
            RGBColor(120, 120, 120).mix(0.15).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label.clone(),
            (*a, y0 + (y1 - y0) * 0.08),
            ("sans-serif", 12).into_font().color(&RGBColor(90, 90, 90)),
        )))?;
    }
    Ok(())
}

/// The threshold line of `c` across the x span, then its marked points with their labels.
fn draw_hline_and_marks<DB: DrawingBackend>(
    chart: &mut Plane<'_, DB>,
    c: &Chart,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if let Some((y, _)) = &c.hline {
        let red = RGBColor(200, 0, 0);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x0, *y), (x1, *y)],
            red.stroke_width(1),
        )))?;
    }
    for (x, y, label) in &c.marks {
        chart.draw_series([
            Cross::new((*x, *y), 7, BLACK.stroke_width(2)).into_dyn(),
            Text::new(
                label.clone(),
                (*x, *y + (y1 - y0) * 0.06),
                ("sans-serif", 12).into_font(),
            )
            .into_dyn(),
        ])?;
    }
    Ok(())
}

/// Each legend entry's width in pixels: its swatch, its name in the legend's font, a gap.
fn entry_widths<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[Entry]) -> Vec<i32> {
    let font: TextStyle = ("sans-serif", 12).into_font().into();
    entries
        .iter()
        .map(|en| {
            let text = area
                .estimate_text_size(&en.name, &font)
                .map_or(7 * en.name.chars().count() as i32, |(w, _)| w as i32);
            26 + text + 16
        })
        .collect()
}

/// The bar series of `c` side by side in each category, then the `stacked` segments in the
/// last slot.
fn draw_bars<DB: DrawingBackend>(
    chart: &mut Plane<'_, DB>,
    c: &Chart,
    stacked: &[(f64, f64, f64, usize)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let bars: Vec<&Series> = c.series.iter().filter(|s| s.draw == Draw::Bars).collect();
    let slots = bars.len() + usize::from(!stacked.is_empty());
    for (slot, s) in bars.iter().enumerate() {
        chart.draw_series(s.points.iter().map(|&(x, y)| {
            let (left, right) = bar_span(x, slot, slots);
            Rectangle::new([(left, 0.0), (right, y)], color(s.color).filled())
        }))?;
    }
    chart.draw_series(stacked.iter().map(|&(x, base, top, colour)| {
        let (left, right) = bar_span(x, slots - 1, slots);
        Rectangle::new([(left, base), (right, top)], color(colour).filled())
    }))?;
    Ok(())
}

/// The ring's radius in pixels: clear of a point's own marker (4).
const RING_RADIUS: i32 = 8;

/// Where each ringed point of `c` is drawn: a point where it is, a bar or a stacked part at
/// the middle of its top (in its slot beside the other bars of its category).
fn rings(c: &Chart) -> Vec<(f64, f64)> {
    let bars: Vec<usize> = (0..c.series.len())
        .filter(|&i| c.series[i].draw == Draw::Bars)
        .collect();
    let stacked: Vec<usize> = (0..c.series.len())
        .filter(|&i| c.series[i].draw == Draw::Stacked)
        .collect();
    let slots = bars.len() + usize::from(!stacked.is_empty());
    // The stacked parts in the order `stack` gives them: series by series, point by point.
    let segments = stack(c);
    let middle = |x: f64, slot: usize| {
        let (left, right) = bar_span(x, slot, slots);
        (left + right) / 2.0
    };
    c.invalid
        .iter()
        .filter_map(|&(series, point)| {
            let s = c.series.get(series)?;
            let (x, y) = *s.points.get(point)?;
            match s.draw {
                Draw::Bars => {
                    let slot = bars.iter().position(|&b| b == series)?;
                    Some((middle(x, slot), y))
                }
                Draw::Stacked => {
                    let before: usize = stacked
                        .iter()
                        .take_while(|&&i| i != series)
                        .map(|&i| c.series[i].points.len())
                        .sum();
                    let top = segments.get(before + point)?.2;
                    Some((middle(x, slots - 1), top))
                }
                Draw::Line | Draw::Points | Draw::LinePoints | Draw::Dashed => Some((x, y)),
            }
        })
        .collect()
}

/// Why a chart could not be drawn: plotters' error from the SVG or the PNG backend.
#[derive(Debug, Error)]
pub enum PlotError {
    #[error(transparent)]
    Svg(DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>),
    #[error(transparent)]
    Png(DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>),
}

/// Draws `c` on `area`: the plot, then its legend in a strip below it.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let entries = legend_entries(c);
    let widths = entry_widths(area, &entries);
    let (width, height) = area.dim_in_pixel();
    let legend = legend_layout(&widths, width as i32);
    let strip = legend.as_ref().map_or(0, |l| l.size.1 + 6);
    let (area, legend_area) = area.split_vertically((height as i32 - strip).max(1));
    draw_plot(&area, c)?;
    // Drawn last, as a legend is: after every point, in its own strip.
    if let Some(layout) = &legend {
        draw_legend(&legend_area, &entries, layout)?;
    }
    area.present()?;
    legend_area.present()?;
    Ok(())
}

/// The plot above the legend's strip: its axes and mesh, then the shade, the bars, the other
/// series, the right axis with its series, the line and marks, and the rings, in that order.
fn draw_plot<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = x_range(c);
    let stacked = stack(c);
    let (y0, y1) = y_range(c, &stacked);
    let mut chart = build_plane(area, c, (x0, x1), (y0, y1))?;
    draw_mesh(&mut chart, c, x1)?;
    draw_shade(&mut chart, c, (y0, y1))?;
    draw_bars(&mut chart, c, &stacked)?;
    for s in c
        .series
        .iter()
        .filter(|s| !matches!(s.draw, Draw::Bars | Draw::Stacked))
    {
        series!(chart, draw_series, s);
    }
    draw_right_axis(&mut chart, c)?;
    draw_hline_and_marks(&mut chart, c, (x0, x1), (y0, y1))?;
    draw_rings(&mut chart, c)
}

/// The chart's frame on `area`: its title, its label areas (a right one when `c` has a right
/// axis) and both coordinate systems over the x span `(x0, x1)`, the left y span `(y0, y1)`
/// and the right series' span.
fn build_plane<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    c: &Chart,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Result<DualPlane<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&c.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(62);
    if c.right.is_some() {
        builder.right_y_label_area_size(62);
    }
    Ok(builder
        .build_cartesian_2d(x0..x1, y0..y1)?
        .set_secondary_coord(x0..x1, {
            let (r0, r1) = range(
                c.right
                    .iter()
                    .flat_map(|r| r.1.iter().flat_map(|s| s.points.iter().map(|p| p.1))),
                true,
            );
            r0..r1
        }))
}

/// The mesh with the x and left y axes, their labels (up to `x1` on a spectrum) and titles.
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut Plane<'_, DB>,
    c: &Chart,
    x1: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let x_fmt = |x: &f64| match &c.x_axis {
        XAxis::Spectrum => spectrum_label(*x),
        XAxis::Linear => number_label(*x),
        XAxis::Categories(names) => category_label(names, *x),
    };
    let y_fmt = |y: &f64| number_label(*y);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_labels(match &c.x_axis {
            XAxis::Spectrum => (x1.ceil() as usize) + 1,
            XAxis::Linear => 8,
            // Plotters places labels at round steps: asked for enough of them, every whole
            // number (a category) is among them, and the ones between are left blank.
            XAxis::Categories(names) => 4 * names.len() + 4,
        })
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13));
    if matches!(c.x_axis, XAxis::Categories(_)) {
        mesh.disable_x_mesh();
    }
    mesh.draw()
}

/// The right y axis and its series, when `c` has them.
fn draw_right_axis<DB: DrawingBackend>(
    chart: &mut DualPlane<'_, DB>,
    c: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB::ErrorType: 'static,
{
    if let Some((label, right)) = &c.right {
        let y_fmt = |y: &f64| number_label(*y);
        chart
            .configure_secondary_axes()
            .y_desc(label)
            .y_label_formatter(&y_fmt)
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        for s in right {
            series!(chart, draw_secondary_series, s);
        }
    }
    Ok(())
}

/// A ring around each INVALID point of `c`.
fn draw_rings<DB: DrawingBackend>(
    chart: &mut Plane<'_, DB>,
    c: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    // A white halo under each ring keeps it visible on a bar of any colour.
    let ringed = rings(c);
    chart.draw_series(
        ringed
            .iter()
            .map(|p| Circle::new(*p, RING_RADIUS, WHITE.stroke_width(4))),
    )?;
    chart.draw_series(
        ringed
            .iter()
            .map(|p| Circle::new(*p, RING_RADIUS, RING.stroke_width(2))),
    )?;
    Ok(())
}

/// The chart as an SVG document.
pub fn svg(c: &Chart) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let area = SVGBackend::with_string(&mut out, c.size).into_drawing_area();
        draw(&area, c).map_err(PlotError::Svg)?;
    }
    Ok(out)
}

/// Writes the chart as a PNG file.
pub fn png(c: &Chart, path: &Path) -> Result<(), PlotError> {
    let area = BitMapBackend::new(path, c.size).into_drawing_area();
    draw(&area, c).map_err(PlotError::Png)
}

/// Registers a system TrueType font for the plots (plotters measures text with it); the
/// first found of DejaVu Sans, Liberation Sans, Noto Sans. `None` when there is none.
pub fn load_font() -> Option<&'static str> {
    const PATHS: [&str; 5] = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    ];
    static FONT: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *FONT.get_or_init(|| {
        for p in PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Some(p);
                }
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numeric attribute `name` of an SVG element's text.
    fn attribute(element: &str, name: &str) -> Option<f64> {
        let at = element.find(&format!(" {name}=\""))? + name.len() + 3;
        let end = element[at..].find('"')? + at;
        element[at..end].parse().ok()
    }

    /// A box: x0, y0, x1, y1.
    type Corners = (f64, f64, f64, f64);

    /// The legend's box and the centres of the points drawn before it (the
    /// data; the legend's own markers come after its box).
    fn legend_and_points(svg: &str) -> (Corners, Vec<(f64, f64)>) {
        let elements: Vec<&str> = svg.split('<').collect();
        let legend = elements
            .iter()
            .position(|e| e.starts_with("rect") && e.contains("stroke=\"#BEBEBE\""))
            .expect("a legend box");
        let r = elements[legend];
        let (x, y) = (attribute(r, "x").unwrap(), attribute(r, "y").unwrap());
        let (w, h) = (
            attribute(r, "width").unwrap(),
            attribute(r, "height").unwrap(),
        );
        let points = elements[..legend]
            .iter()
            .filter(|e| e.starts_with("circle"))
            .map(|e| (attribute(e, "cx").unwrap(), attribute(e, "cy").unwrap()))
            .collect();
        ((x, y, x + w, y + h), points)
    }

    #[test]
    fn the_legend_never_covers_a_point() {
        // plotters measures text with a font, as the report does (it refuses without one).
        assert!(
            load_font().is_some(),
            "no TrueType font: install fonts-dejavu-core"
        );
        // The report's p50-vs-load chart of the issue: both variants highest at the lowest
        // load, in the top left corner where a legend inside the plot sits; and points in
        // every other corner too.
        let mut c = Chart::new("p50", "p50 latency vs offered load", "load", "p50 (ms)");
        for (i, name) in ["baseline", "serveronly"].iter().enumerate() {
            let k = i as f64 * 0.05;
            c.series.push(Series {
                name: name.to_string(),
                points: vec![
                    (500.0, 9.0 + k),
                    (1000.0, 0.1 + k),
                    (2000.0, 4.0 + k),
                    (4000.0, 9.5 + k),
                ],
                draw: if i == 0 {
                    Draw::LinePoints
                } else {
                    Draw::Points
                },
                color: i,
            });
        }
        c.hline = Some((5.0, "SLO".into()));
        let svg = svg(&c).unwrap();
        let ((x0, y0, x1, y1), points) = legend_and_points(&svg);
        assert_eq!(points.len(), 8, "every point drawn: {points:?}");
        for (x, y) in points {
            // A point's marker has a radius of 4: its whole disc stays clear of the box.
            let inside = x + 4.0 >= x0 && x - 4.0 <= x1 && y + 4.0 >= y0 && y - 4.0 <= y1;
            assert!(
                !inside,
                "point ({x}, {y}) under the legend ({x0}, {y0})-({x1}, {y1})"
            );
        }
    }

    #[test]
    fn a_point_from_an_invalid_step_is_ringed_where_it_is_drawn() {
        assert!(load_font().is_some(), "no TrueType font");
        let invalid = Invalid {
            causes: vec![Cause::CpuContention],
            runs: 1,
            of: 1,
        };
        let mut c = Chart::new("p", "p99 vs throughput", "req/s", "p99 (ms)");
        c.push_judged(
            Series {
                name: "gateway".into(),
                points: vec![(100.0, 1.0), (200.0, 3.0)],
                draw: Draw::Points,
                color: 0,
            },
            &[None, Some(invalid)],
        );
        assert_eq!(c.invalid, [(0, 1)]);
        assert_eq!(c.ring_label().as_deref(), Some("INVALID: cpu_contention"));
        let svg = svg(&c).unwrap();
        let circles: Vec<(f64, f64, bool)> = svg
            .split('<')
            .filter(|e| e.starts_with("circle"))
            .map(|e| {
                (
                    attribute(e, "cx").unwrap(),
                    attribute(e, "cy").unwrap(),
                    e.contains("stroke=\"#AA0000\""),
                )
            })
            .collect();
        // The two points, the ring around the second (over its white halo), then the legend's
        // point and ring.
        let ring = circles.iter().find(|c| c.2).expect("a ring");
        assert_eq!(
            (ring.0, ring.1),
            (circles[1].0, circles[1].1),
            "{circles:?}"
        );
        assert_eq!(circles.iter().filter(|c| c.2).count(), 2, "{circles:?}");
        assert!(svg.contains("INVALID: cpu_contention"), "{svg}");
    }

    #[test]
    fn bars_stand_side_by_side_within_their_category() {
        assert_eq!(bar_span(1.0, 0, 1), (0.6, 1.4));
        let (a, b) = (bar_span(2.0, 0, 2), bar_span(2.0, 1, 2));
        assert!(
            (a.1 - b.0).abs() < 1e-9 && a.0 > 1.5 && b.1 < 2.5,
            "{a:?} {b:?}"
        );
        let names = ["baseline".to_string(), "both".to_string()];
        assert_eq!(category_label(&names, 1.0), "both");
        assert_eq!(category_label(&names, 0.5), "");
        assert_eq!(category_label(&names, 2.0), "");
        assert!(load_font().is_some(), "no TrueType font");
        let mut c = Chart::new("bars", "p99 by variant", "variant", "p99 (ms)");
        c.x_axis = XAxis::Categories(names.to_vec());
        for (i, load) in ["uniform", "poisson"].iter().enumerate() {
            c.series.push(Series {
                name: load.to_string(),
                points: vec![(0.0, 1.0 + i as f64), (1.0, 3.0 + i as f64)],
                draw: Draw::Bars,
                color: i,
            });
        }
        let svg = svg(&c).unwrap();
        // Four bars and the legend's two squares, each name under its category.
        let filled = svg
            .split('<')
            .filter(|e| e.starts_with("rect") && e.contains("fill=\"#1F77B4\""))
            .count();
        assert_eq!(
            filled, 3,
            "two bars and a legend square in the first colour: {svg}"
        );
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split('<').next()?.trim()))
            .collect();
        for name in ["baseline", "both", "uniform", "poisson"] {
            assert_eq!(
                texts.iter().filter(|t| **t == name).count(),
                1,
                "{name} once: {texts:?}"
            );
        }
    }

    #[test]
    fn stacked_series_pile_up_per_category_in_their_order() {
        let mut c = Chart::new("s", "s", "x", "y");
        c.x_axis = XAxis::Categories(vec!["a".into(), "b".into()]);
        for (i, points) in [vec![(0.0, 1.0), (1.0, 2.0)], vec![(0.0, 3.0), (1.0, -1.0)]]
            .into_iter()
            .enumerate()
        {
            c.series.push(Series {
                name: format!("part {i}"),
                points,
                draw: Draw::Stacked,
                color: i,
            });
        }
        // A part below zero adds nothing (its bar has no height).
        assert_eq!(
            stack(&c),
            vec![
                (0.0, 0.0, 1.0, 0),
                (1.0, 0.0, 2.0, 0),
                (0.0, 1.0, 4.0, 1),
                (1.0, 2.0, 2.0, 1)
            ]
        );
        assert!(load_font().is_some(), "no TrueType font");
        let svg = svg(&c).unwrap();
        assert!(svg.contains("part 1"), "the legend names every part");
    }

    #[test]
    fn spectrum_labels_read_as_percentiles() {
        assert_eq!(spectrum_label(0.0), "0%");
        assert_eq!(spectrum_label(1.0), "90%");
        assert_eq!(spectrum_label(2.0), "99%");
        assert_eq!(spectrum_label(3.0), "99.9%");
        assert_eq!(spectrum_label(4.0), "99.99%");
    }

    #[test]
    fn ranges_are_scaled_to_the_data() {
        assert_eq!(range([2.0, 4.0].into_iter(), false), (1.9, 4.1));
        let (lo, hi) = range([2.0, 4.0].into_iter(), true);
        assert_eq!(lo, 0.0);
        assert!((hi - 4.2).abs() < 1e-9);
        assert_eq!(range(std::iter::empty(), true), (0.0, 1.0));
    }
}
