//! Writing a built [`Report`]: the one self-contained HTML file (inline SVG and CSS) and every
//! chart beside it as SVG and PNG. A cell or a sentence carrying the self-check's mark
//! (`INVALID: ...`) stands out in red; a column of marks where no row has one is left out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Block, Report, ReportError};
use crate::answers::Table;
use crate::plot::{self, Chart};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A table cell: its first line as it is, the lines under it (a difference's interval) smaller.
fn cell_html(cell: &str) -> String {
    let mut lines = cell.lines();
    let mut out = esc(lines.next().unwrap_or(""));
    for more in lines {
        let _ = write!(out, "<br><small>{}</small>", esc(more));
    }
    out
}

/// The page's style. Tables fit a 1280-pixel window: headers wrap between words, a figure
/// never does, intervals are smaller, and a table wider than the page (very long variant names)
/// scrolls inside its own box rather than pushing the page wider.
const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
.sub{color:#666;margin-top:0}.table{max-width:100%;overflow-x:auto;margin:1em 0}
table{border-collapse:collapse;font-size:.85em}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f3f3f3;white-space:normal;font-weight:600}td small{color:#666;font-size:.85em}
td.w{text-align:left}td.bad,p.bad,caption.bad{color:#a00;font-weight:600}tr.load th{text-align:left;background:#fafafa;font-weight:normal;font-style:italic}
caption{text-align:left;font-weight:bold;padding:.3em 0}td:first-child,th:first-child{text-align:left;white-space:normal}
figure{margin:1.5em 0;page-break-inside:avoid}figcaption{color:#444;max-width:760px}
svg{max-width:100%;height:auto}@media print{body{max-width:none}h2{page-break-before:auto}}";

/// What `write` produced.
#[derive(Debug, Clone)]
pub struct Written {
    pub html: PathBuf,
    pub svgs: usize,
    pub pngs: usize,
}

/// Writes report.html and plots/{id}.svg and .png into `dir`.
pub fn write(r: &Report, dir: &Path) -> Result<Written, ReportError> {
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|source| ReportError::Write {
        path: plots.clone(),
        source,
    })?;
    let charts: Vec<&Chart> = r
        .sections
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter_map(|b| match b {
            Block::Chart(c) => Some(c.as_ref()),
            _ => None,
        })
        .collect();
    // A report without charts (control-plane steps alone) needs no font.
    if !charts.is_empty() && plot::load_font().is_none() {
        return Err(ReportError::NoFont);
    }
    let svgs = draw_charts(&charts, &plots)?;
    let html = page(r, svgs);
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|source| ReportError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(Written {
        html: path,
        svgs: charts.len(),
        pngs: charts.len(),
    })
}

/// Draws every chart into `plots` as SVG and PNG, the charts shared over the cores (each is
/// drawn twice); their SVG texts in the charts' order, or the first chart's error.
fn draw_charts(charts: &[&Chart], plots: &Path) -> Result<Vec<String>, ReportError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let svgs: Vec<Result<String, ReportError>> = std::thread::scope(|scope| {
        let chunks: Vec<Vec<(usize, &Chart)>> = (0..threads)
            .map(|t| {
                charts
                    .iter()
                    .copied()
                    .enumerate()
                    .skip(t)
                    .step_by(threads)
                    .collect()
            })
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|(i, c)| Ok((i, draw_chart(c, plots)?)))
                        .collect::<Vec<Result<(usize, String), ReportError>>>()
                })
            })
            .collect();
        let mut all: Vec<Option<Result<String, ReportError>>> =
            (0..charts.len()).map(|_| None).collect();
        for h in handles {
            for item in h.join().unwrap_or_default() {
                match item {
                    Ok((i, svg)) => all[i] = Some(Ok(svg)),
                    Err(e) => return vec![Err(e)],
                }
            }
        }
        all.into_iter().flatten().collect()
    });
    svgs.into_iter().collect()
}

/// Writes one chart's plots/{id}.svg and .png; its SVG text.
fn draw_chart(c: &Chart, plots: &Path) -> Result<String, ReportError> {
    let fail = |source: plot::PlotError| ReportError::Chart {
        id: c.id.clone(),
        source,
    };
    let svg = plot::svg(c).map_err(fail)?;
    let path = plots.join(format!("{}.svg", c.id));
    std::fs::write(&path, &svg).map_err(|source| ReportError::Write { path, source })?;
    plot::png(c, &plots.join(format!("{}.png", c.id))).map_err(fail)?;
    Ok(svg)
}

/// The HTML page of `r`, its charts' SVG texts (`svgs`, in order) inline.
fn page(r: &Report, svgs: Vec<String>) -> String {
    let mut html = String::with_capacity(svgs.iter().map(String::len).sum::<usize>() + 65536);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1><p class=\"sub\">{}</p>\n",
        esc(&r.title),
        esc(&r.title),
        esc(&r.subtitle)
    );
    let mut next_svg = svgs.into_iter();
    for s in &r.sections {
        let _ = writeln!(html, "<h2>{}</h2>", esc(&s.title));
        for b in &s.blocks {
            match b {
                Block::Text(t) | Block::Finding(t) => {
                    let class = if t.contains("INVALID") {
                        " class=\"bad\""
                    } else {
                        ""
                    };
                    let _ = writeln!(html, "<p{class}>{}</p>", esc(t));
                }
                Block::Table { caption, table: t } => table_html(&mut html, caption, t),
                Block::Chart(c) => {
                    let svg = next_svg.next().unwrap_or_default();
                    // The inline copy drops the XML prolog, which HTML does not take.
                    let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
                    let _ = writeln!(
                        html,
                        "<figure id=\"{}\">{body}<figcaption>{}</figcaption></figure>",
                        esc(&c.id),
                        esc(&c.sentence)
                    );
                }
            }
        }
    }
    html.push_str("</body></html>\n");
    html
}

/// Which columns of `t` are shown: all but a column without a header whose every cell is
/// empty (the marks' column of a table no row of which has a mark).
fn shown_columns(t: &Table) -> Vec<bool> {
    (0..t[0].len())
        .map(|c| {
            !t[0][c].is_empty()
                || t[1..]
                    .iter()
                    .filter(|r| !crate::answers::is_heading(r))
                    .any(|r| r.get(c).is_some_and(|cell| !cell.is_empty()))
        })
        .collect()
}

/// Appends table `t` (its first row the header) with its caption to `html`.
fn table_html(html: &mut String, caption: &str, t: &Table) {
    let shown = shown_columns(t);
    let _ = write!(
        html,
        "<div class=\"table\"><table>\n<caption{}>{}</caption>\n<tr>",
        if caption.contains("INVALID") {
            " class=\"bad\""
        } else {
            ""
        },
        esc(caption)
    );
    for (h, _) in t[0].iter().zip(&shown).filter(|(_, s)| **s) {
        let _ = write!(html, "<th>{}</th>", esc(h).replace('\n', "<br>"));
    }
    html.push_str("</tr>\n");
    for row in &t[1..] {
        if crate::answers::is_heading(row) {
            let _ = writeln!(
                html,
                "<tr class=\"load\"><th colspan=\"{}\">{}</th></tr>",
                shown.iter().filter(|s| **s).count(),
                esc(&row[0])
            );
            continue;
        }
        html.push_str("<tr>");
        for (cell, _) in row.iter().zip(&shown).filter(|(_, s)| **s) {
            // Words (a role, a finding) read from the left, figures from the right; the
            // self-check's mark stands out.
            let class = if cell.starts_with("INVALID") {
                " class=\"w bad\""
            } else if cell.chars().next().is_some_and(char::is_alphabetic) {
                " class=\"w\""
            } else {
                ""
            };
            let _ = write!(html, "<td{class}>{}</td>", cell_html(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table></div>\n");
}
