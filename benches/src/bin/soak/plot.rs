//! The soak's samples as a PNG: four panels over time (memory, descriptors and threads,
//! connections, CPU), the load's end marked.

use std::path::Path;

use plotters::prelude::*;

use super::sample::Sample;

/// Fonts tried for the labels, in order (DejaVu: Debian's fonts-dejavu-core).
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a font for plotters' text; plotters keeps it for the process's life.
fn font() -> anyhow::Result<()> {
    let path = FONTS
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| {
            anyhow::anyhow!("no font for the plot's labels (install fonts-dejavu-core)")
        })?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{path}: not a font plotters can read"))
}

type Series<'a> = (&'a str, RGBColor, Box<dyn Fn(&Sample) -> f64 + 'a>);

/// Writes the plot of `samples` to `png`; the load ended at `load_end` seconds.
pub fn write(samples: &[Sample], load_end: f64, png: &Path) -> anyhow::Result<()> {
    font()?;
    let root = BitMapBackend::new(png, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 2));
    let t_max = samples.last().map_or(1.0, |s| s.t).max(1.0);
    // CPU per second from the cumulative seconds.
    let cpu: Vec<f64> = samples
        .windows(2)
        .map(|w| ((w[1].cpu_s - w[0].cpu_s) / (w[1].t - w[0].t).max(1e-3)) * 100.0)
        .collect();
    let cpu_at = |s: &Sample| {
        samples
            .iter()
            .position(|x| std::ptr::eq(x, s))
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| cpu.get(i).copied())
            .unwrap_or(0.0)
    };
    let panel_defs: [(&str, Vec<Series<'_>>); 4] = [
        (
            "server RSS [MiB]",
            vec![(
                "RSS",
                BLUE,
                Box::new(|s: &Sample| s.rss_kib as f64 / 1024.0),
            )],
        ),
        (
            "descriptors and threads",
            vec![
                ("fds", RED, Box::new(|s: &Sample| s.fds as f64)),
                ("threads", GREEN, Box::new(|s: &Sample| s.threads as f64)),
            ],
        ),
        (
            "connections",
            vec![
                ("open", BLUE, Box::new(|s: &Sample| s.open as f64)),
                ("half-open", RED, Box::new(|s: &Sample| s.half_open as f64)),
            ],
        ),
        (
            "server CPU [% of a core]",
            vec![("CPU", MAGENTA, Box::new(cpu_at))],
        ),
    ];
    for (area, (title, series)) in panels.iter().zip(panel_defs) {
        let y_max = series
            .iter()
            .flat_map(|(_, _, f)| samples.iter().map(f))
            .fold(1.0_f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .label_style(("sans-serif", 14))
            .draw()?;
        for (name, colour, f) in series {
            chart
                .draw_series(LineSeries::new(
                    samples.iter().map(|s| (s.t, f(s))),
                    &colour,
                ))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
        }
        chart.draw_series(LineSeries::new(
            [(load_end, 0.0), (load_end, y_max)],
            BLACK.mix(0.4),
        ))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
