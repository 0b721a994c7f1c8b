"""The numbers: calibration levels (raw, L0, L1), metrics with bootstrap intervals, and evaluating a cell."""
