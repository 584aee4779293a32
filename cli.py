"""`python cli.py ...` runs the same command line as the installed `edgespec` script."""
from edgespec.exits import launch

if __name__ == "__main__":
    launch()
