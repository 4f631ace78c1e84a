# cmake -DSCDOC=scdoc -DIN=page.scd -DOUT=page -P scdoc.cmake: one man page,
# written whole or not at all (a failed scdoc leaves no half page behind).
execute_process(COMMAND ${SCDOC} INPUT_FILE ${IN} OUTPUT_FILE ${OUT}.tmp
	ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
	file(REMOVE ${OUT}.tmp)
	message(FATAL_ERROR "scdoc ${IN}: ${err}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
