//! Plots (todo)
