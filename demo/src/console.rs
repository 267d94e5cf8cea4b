//! The demo's console: the story's lines above a live status line.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

pub struct Console {
    pub tty: bool,
    pub start: Instant,
    pub status: Mutex<String>,
}

impl Console {
    pub fn elapsed(&self) -> String {
        format!("[{:>6.1}s]", self.start.elapsed().as_secs_f64())
    }

    /// One line of the story, above the live status line.
    pub fn event(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        if self.tty {
            let _ = write!(out, "\r\x1b[2K");
        }
        let _ = writeln!(out, "{} {text}", self.elapsed());
        if self.tty {
            let _ = write!(out, "{}", self.status.lock().unwrap());
        }
        let _ = out.flush();
    }

    /// The live status: redrawn in place on a terminal, printed now and then otherwise.
    pub fn status(&self, text: String, print_plain: bool) {
        let line = format!("{} {text}", self.elapsed());
        if self.tty {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K{line}");
            let _ = out.flush();
        } else if print_plain {
            println!("{line}");
        }
        *self.status.lock().unwrap() = line;
    }

    pub fn end_status(&self) {
        if self.tty {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }
}
