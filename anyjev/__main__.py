from anyjev.cli import run

run()
