//! Markdown tables, so bench output pastes straight into the README.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    pub fn print(&self, title: &str) {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| self.rows.iter().map(|r| r[i].len()).chain([self.header[i].len()]).max().unwrap_or(0))
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
            println!("| {} |", padded.join(" | "));
        };
        println!("\n### {title}\n");
        line(&self.header);
        println!("|{}|", widths.iter().map(|w| format!("{}:", "-".repeat(*w + 1))).collect::<Vec<_>>().join("|"));
        for row in &self.rows {
            line(row);
        }
    }
}

/// Formats a number with a sensible number of digits.
pub fn num(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else if x >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A ratio as `1.23x`.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}

/// Bytes with a binary unit.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}
