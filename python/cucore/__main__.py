from cucore._cli import main

main()
