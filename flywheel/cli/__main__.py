from flywheel.cli import app

app()
