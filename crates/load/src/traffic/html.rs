//! The `--report FILE.html` page: one self-contained file (no script, style or font from
//! the network) with the summary table and a plot per figure over time, drawn as inline
//! SVG. A short inline script checks on load that every plot has data and writes what it
//! found into `data-result` on the body (the test suite reads it from a real Chromium).

use std::fmt::Write;

/// A line on a plot.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Its name in the legend.
    pub(crate) name: String,
    /// One value per step of the x axis.
    pub(crate) values: Vec<f64>,
}

/// A plot: a title, a unit, and its lines.
#[derive(Debug, Clone)]
pub(crate) struct Plot {
    /// What it shows.
    pub(crate) title: String,
    /// What one step along the x axis is (`s`: a value per second).
    pub(crate) x_unit: &'static str,
    /// The unit of its values.
    pub(crate) unit: String,
    /// Its lines.
    pub(crate) series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
const MARGIN: f64 = 48.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// The whole page.
pub(crate) fn page(title: &str, rows: &[(String, String)], plots: &[Plot]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\
body{{font:14px sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse}}\
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:left}}\
svg{{display:block;margin:12px 0 24px}}text{{font:11px sans-serif}}</style></head>\n<body>\n<h1>{}</h1>\n<table>\n",
        escape(title),
        escape(title)
    );
    for (name, value) in rows {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(value)
        );
    }
    out.push_str("</table>\n");
    for plot in plots {
        svg(&mut out, plot);
    }
    out.push_str(
        "<script>\n\
addEventListener('load', () => {\n\
  const plots = [...document.querySelectorAll('svg.plot')];\n\
  let points = 0, drawn = 0;\n\
  for (const plot of plots) {\n\
    for (const line of plot.querySelectorAll('polyline')) {\n\
      const n = line.points.numberOfItems;\n\
      points += n;\n\
      if (n > 1 && line.getBBox().width > 0) drawn++;\n\
    }\n\
  }\n\
  document.body.dataset.result = `plots=${plots.length} lines=${drawn} points=${points}`;\n\
});\n\
</script>\n</body></html>\n",
    );
    out
}

fn svg(out: &mut String, plot: &Plot) {
    let seconds = plot
        .series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0);
    let top = plot
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let x = |i: usize| MARGIN + (WIDTH - 2.0 * MARGIN) * i as f64 / (seconds.max(2) - 1) as f64;
    let y = |v: f64| HEIGHT - MARGIN + (-(HEIGHT - 2.0 * MARGIN) * v / top);
    let _ = write!(
        out,
        "<h2>{}</h2>\n<svg class=\"plot\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">\n\
<line x1=\"{MARGIN}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/>\
<line x1=\"{MARGIN}\" y1=\"{MARGIN}\" x2=\"{MARGIN}\" y2=\"{b}\" stroke=\"#888\"/>\n\
<text x=\"4\" y=\"{t}\">{:.1}</text><text x=\"4\" y=\"{b}\">0 {}</text>\
<text x=\"{MARGIN}\" y=\"{l}\">0 {x}</text><text x=\"{r2}\" y=\"{l}\">{} {x}</text>\n",
        escape(&plot.title),
        top,
        escape(&plot.unit),
        seconds.saturating_sub(1),
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN,
        r2 = WIDTH - MARGIN - 20.0,
        t = MARGIN + 4.0,
        l = HEIGHT - MARGIN + 16.0,
        x = escape(plot.x_unit),
    );
    for (n, series) in plot.series.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        let points: Vec<String> = series
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\
<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{color}\">{}</text>",
            points.join(" "),
            WIDTH - MARGIN - 140.0,
            MARGIN + 14.0 * n as f64,
            escape(&series.name)
        );
    }
    out.push_str("</svg>\n");
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_its_table_and_a_line_per_series_and_nothing_from_the_network() {
        let plots = [Plot {
            x_unit: "s",
            title: "requests/s <all>".into(),
            unit: "req/s".into(),
            series: vec![Series {
                name: "target".into(),
                values: vec![1.0, 3.0, 2.0],
            }],
        }];
        let html = page("replay", &[("requests".into(), "6".into())], &plots);
        assert!(html.contains("<th>requests</th><td>6</td>"));
        assert!(html.contains("requests/s &lt;all&gt;"));
        assert_eq!(html.matches("<polyline").count(), 1);
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains(" src="));
    }
}
