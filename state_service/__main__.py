"""`python -m state_service`."""

from state_service.server import main

main()
