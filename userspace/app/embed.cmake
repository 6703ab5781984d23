# Writes the text of INPUT into OUTPUT as a C++ raw string named kDemoConfig.
file(READ ${INPUT} text)
file(WRITE ${OUTPUT} "#include \"app/demo_config.h\"\nnamespace vecflow {\nconst char* const kDemoConfig = R\"vecflow_demo(${text})vecflow_demo\";\n}\n")
