from .exits import launch

launch()
