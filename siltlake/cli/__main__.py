from siltlake.cli import main

main(prog_name="silt")
