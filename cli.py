"""`python cli.py ...` runs the same command line as the installed `edgespec` script."""
from edgespec.cli import main

if __name__ == "__main__":
    main()
