"""The performance model: what a step costs on this hardware (``costs``: the step-cost curve, its
measurement and cache, the speedup account of a run) and which settings pay off (``tune``: the
grid, the ranking, what-if from one trace). Plain Python except measuring, which needs torch."""
