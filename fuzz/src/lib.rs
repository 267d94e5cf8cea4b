//! The fuzz targets' checks (see [`checks`]).

pub mod checks;
