/** jest project `http-on-kafka`: every stack of these suites runs its event bus on the test run's Kafka broker. */
process.env.TEST_BUS = 'kafka';
