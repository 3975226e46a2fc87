from toolq.cli import main

main()
