"""`python -m rocmc ...`: the rocmc command line."""

from ._cli import main

main()
